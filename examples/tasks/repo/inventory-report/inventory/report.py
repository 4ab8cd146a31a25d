from inventory.store import Store


def summary(lines):
    store = Store(lines)
    return {name: store.counts[name] for name in store.names()}
