from calc.tokens import tokenize

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}
PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


def evaluate(text):
    values, ops = [], []
    for tok in tokenize(text):
        if isinstance(tok, float):
            values.append(tok)
            continue
        while ops and PREC[ops[-1]] >= PREC[tok]:
            _apply(values, ops.pop())
        ops.append(tok)
    while ops:
        _apply(values, ops.pop())
    return values[0]


def _apply(values, op):
    b, a = values.pop(), values.pop()
    values.append(OPS[op](a, b))
