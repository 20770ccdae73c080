import unittest

from stats import mean, median, variance


class StatsTest(unittest.TestCase):
    def test_mean(self):
        self.assertAlmostEqual(mean([1, 2, 3, 4]), 2.5)

    def test_median_odd(self):
        self.assertEqual(median([5, 1, 3]), 3)

    def test_median_even(self):
        self.assertAlmostEqual(median([4, 1, 3, 2]), 2.5)
        self.assertAlmostEqual(median([10, 20]), 15)

    def test_variance(self):
        # sample variance of 2, 4, 4, 4, 5, 5, 7, 9: mean 5, squares sum 32, n - 1 = 7
        self.assertAlmostEqual(variance([2, 4, 4, 4, 5, 5, 7, 9]), 32 / 7)
        self.assertEqual(variance([3]), 0.0)


if __name__ == "__main__":
    unittest.main()
