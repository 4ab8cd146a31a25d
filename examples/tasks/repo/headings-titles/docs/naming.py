import inflection


def label(slug):
    return inflection.humanize(slug)
