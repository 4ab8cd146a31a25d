import re


def words(text):
    return re.split(r"[^a-z0-9]", text.lower())
