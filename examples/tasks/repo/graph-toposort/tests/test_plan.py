from deps.plan import install_order


def test_shared_dependency():
    assert install_order({"a": ["c"], "b": ["c"], "c": []}) == ["c", "a", "b"]


def test_chain():
    assert install_order({"a": ["b"], "b": ["c"], "c": []}) == ["c", "b", "a"]


def test_single():
    assert install_order({"a": []}) == ["a"]
