from inventory.report import summary


def test_summary_counts_case_insensitively():
    assert summary(["Widget, 3", "widget, 2", "bolt, 1"]) == {"bolt": 1, "widget": 5}


def test_summary_skips_comments():
    assert summary(["# stock", "bolt, 4"]) == {"bolt": 4}
