from sympy.calc import clamp


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0
