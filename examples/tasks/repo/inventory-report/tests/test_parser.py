from inventory.parser import parse_lines


def test_parse_lines_reads_counts():
    assert [c for _, c in parse_lines(["a, 1", "b, 22"])] == [1, 22]
