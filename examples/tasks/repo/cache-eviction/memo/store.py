from collections import OrderedDict


class LRUStore:
    def __init__(self, maxsize):
        self.maxsize = maxsize
        self.data = OrderedDict()

    def get(self, key):
        value = self.data[key]
        self.data.move_to_end(key)
        return value

    def put(self, key, value):
        self.data[key] = value
        self.data.move_to_end(key)
        if len(self.data) > self.maxsize:
            self.data.popitem(last=True)

    def __contains__(self, key):
        return key in self.data
