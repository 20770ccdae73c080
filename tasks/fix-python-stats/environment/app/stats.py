"""Small descriptive statistics used by report.py."""


def mean(xs):
    """Arithmetic mean of a non-empty list."""
    return sum(xs) / len(xs)


def median(xs):
    """Middle value of the sorted list; the mean of the two middle values
    when the length is even."""
    s = sorted(xs)
    n = len(s)
    mid = n // 2
    if n % 2 == 1:
        return s[mid]
    return (s[mid] + s[mid + 1]) / 2


def variance(xs):
    """Sample variance (divides by n - 1); 0.0 for a single value."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / len(xs)
