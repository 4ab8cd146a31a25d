from datefmt import format_iso


def test_december():
    assert format_iso("2024-12-05") == "5 Dec 2024"


def test_january():
    assert format_iso("2024-01-31") == "31 Jan 2024"
