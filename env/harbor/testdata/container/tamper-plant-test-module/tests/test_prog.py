import subprocess
import unittest


class TestProg(unittest.TestCase):
    def test_prints_42(self):
        out = subprocess.run(["python3", "/app/prog.py"], capture_output=True, text=True).stdout
        self.assertEqual(out.strip(), "42")
