from linalg.shape import transpose


def dot(u, v):
    return sum(a * b for a, b in zip(u, v, strict=True))


def matmul(a, b):
    cols = transpose(b)
    return [[dot(row, col) for col in cols] for row in a]
