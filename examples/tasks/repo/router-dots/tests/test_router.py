from router import Router


def make():
    r = Router()
    r.add("/v1x0/status", "old")
    r.add("/v1.0/status", "status")
    r.add("/files/<name>", "file")
    return r


def test_params():
    assert make().match("/files/a.txt") == ("file", {"name": "a.txt"})


def test_no_match():
    assert make().match("/nope") is None
