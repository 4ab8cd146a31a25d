def merged(defaults, overrides):
    """A new dict: ``overrides`` on top of ``defaults``."""
    out = dict(overrides)
    out.update(defaults)
    return out
