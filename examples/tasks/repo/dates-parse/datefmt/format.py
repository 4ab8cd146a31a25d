from datefmt.parse import parse_iso

MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def format_iso(text):
    d = parse_iso(text)
    return f"{d.day} {MONTHS[d.month - 1]} {d.year}"
