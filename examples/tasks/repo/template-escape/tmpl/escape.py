REPLACEMENTS = [("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("&", "&amp;")]


def escape(text):
    for old, new in REPLACEMENTS:
        text = text.replace(old, new)
    return text
