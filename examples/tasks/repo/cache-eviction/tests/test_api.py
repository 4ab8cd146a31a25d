from memo import cached


def test_keeps_most_recent():
    calls = []

    @cached(maxsize=2)
    def f(x):
        calls.append(x)
        return x * 2

    assert [f(1), f(2), f(3), f(3)] == [2, 4, 6, 6]
    assert calls == [1, 2, 3]


def test_returns_values():
    @cached()
    def g(x):
        return x + 1

    assert g(1) == 2 and g(1) == 2
