import functools

from memo.store import LRUStore


def cached(maxsize=128):
    def decorate(fn):
        store = LRUStore(maxsize)

        @functools.wraps(fn)
        def wrapper(*args):
            if args in store:
                return store.get(args)
            value = fn(*args)
            store.put(args, value)
            return value

        wrapper.store = store
        return wrapper

    return decorate
