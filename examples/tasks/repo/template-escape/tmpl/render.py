import string

from tmpl.escape import escape


def render(template, **values):
    return string.Formatter().vformat(template, (), {k: escape(str(v)) for k, v in values.items()})
