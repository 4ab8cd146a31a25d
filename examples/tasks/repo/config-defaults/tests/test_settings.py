from config import Settings


def test_user_value_wins():
    assert Settings({"color": "red"}).get("color") == "red"


def test_defaults_fill_in():
    assert Settings({"color": "red"}).get("size") == 10


def test_no_user_settings():
    assert Settings().get("verbose") is False
