def toposort(graph):
    """Nodes of ``graph`` ({node: [dependencies]}) so that each comes after its dependencies."""
    order = []

    def visit(node, seen):
        if node in seen:
            return
        seen.add(node)
        for dep in graph.get(node, []):
            visit(dep, seen)
        order.append(node)

    for node in sorted(graph):
        visit(node, set())
    return order
