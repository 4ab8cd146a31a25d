DEFAULTS = {"color": "blue", "size": 10, "verbose": False}
