import re


def compile_route(route):
    """A compiled regex for a route like '/files/<name>' ('<x>' matches one path segment)."""
    parts = []
    for piece in re.split(r"(<[a-z_]+>)", route):
        if piece.startswith("<") and piece.endswith(">"):
            parts.append(f"(?P<{piece[1:-1]}>[^/]+)")
        else:
            parts.append(piece)
    return re.compile("^" + "".join(parts) + "$")
