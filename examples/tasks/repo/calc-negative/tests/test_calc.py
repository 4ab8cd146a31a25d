from calc import evaluate


def test_negative_operand():
    assert evaluate("3 - -2") == 5.0


def test_leading_negative():
    assert evaluate("-4 + 1") == -3.0


def test_precedence():
    assert evaluate("2 + 3 * 4") == 14.0
