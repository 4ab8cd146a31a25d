from docs.headings import toc


def test_toc_titleizes():
    assert toc(["getting_started", "api_reference"]) == ["Getting Started", "Api Reference"]


def test_empty():
    assert toc([]) == []
