import pytest

from units import convert


def test_km_to_m():
    assert convert(1, "km", "m") == 1000.0


def test_mm_to_cm():
    assert convert(10, "mm", "cm") == 1.0


def test_same_unit():
    assert convert(3, "m", "m") == 3.0


def test_unknown_unit():
    with pytest.raises(ValueError):
        convert(1, "mile", "m")
