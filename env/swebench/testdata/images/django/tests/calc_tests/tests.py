import unittest

from calc import clamp


class ClampTests(unittest.TestCase):
    def test_clamp_low(self):
        self.assertEqual(clamp(-5, 0, 10), 0)
