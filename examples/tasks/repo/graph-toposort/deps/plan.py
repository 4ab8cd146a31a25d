from deps.graph import toposort


def install_order(graph):
    order = toposort(graph)
    installed = set()
    for name in order:
        if name in installed:
            raise ValueError(f"{name!r} is installed twice")
        installed.add(name)
    return order
