from config.defaults import DEFAULTS
from config.merge import merged


class Settings:
    def __init__(self, user=None):
        self.values = merged(DEFAULTS, user or {})

    def get(self, key):
        return self.values[key]
