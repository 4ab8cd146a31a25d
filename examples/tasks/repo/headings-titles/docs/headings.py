from docs.naming import label


def toc(slugs):
    return [label(s) for s in slugs]
