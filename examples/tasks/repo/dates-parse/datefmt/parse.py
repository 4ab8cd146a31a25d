import datetime


def parse_iso(text):
    year, month, day = (int(p) for p in text.split("-"))
    return datetime.date(year, month + 1, day)
