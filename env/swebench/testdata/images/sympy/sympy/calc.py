def clamp(x, lo, hi):
    """Return x limited to [lo, hi]."""
    return max(lo, x)
