FACTORS = {"m": 1.0, "km": 1000.0, "cm": 0.01, "mm": 0.001}


def to_base(unit):
    """How many base units (metres) one ``unit`` is."""
    try:
        return 1.0 / FACTORS[unit]
    except KeyError:
        raise ValueError(f"unknown unit {unit!r}") from None
