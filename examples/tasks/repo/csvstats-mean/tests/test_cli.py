from csvstats.cli import column_mean

CSV = "name,price\napple,1.0\npear,3.0\n"


def test_column_mean():
    assert column_mean(CSV, "price") == 2.0


def test_single_row():
    assert column_mean("name,price\nfig,5\n", "price") == 5.0
