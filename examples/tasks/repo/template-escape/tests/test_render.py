from tmpl import render


def test_ampersand_once():
    assert render("<b>{x}</b>", x="a & b") == "<b>a &amp; b</b>"


def test_angle_brackets():
    assert render("{x}", x="<i>") == "&lt;i&gt;"
