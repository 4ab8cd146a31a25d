from units.registry import to_base


def convert(value, src, dst):
    return round(value * to_base(src) / to_base(dst), 9)
