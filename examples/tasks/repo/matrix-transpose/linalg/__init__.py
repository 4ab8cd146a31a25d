from linalg.ops import matmul
