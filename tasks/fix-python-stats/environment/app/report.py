import sys

from stats import mean, median, variance

values = [float(line) for line in sys.stdin if line.strip()]
print(f"mean={mean(values):.3f} median={median(values):.3f} variance={variance(values):.3f}")
