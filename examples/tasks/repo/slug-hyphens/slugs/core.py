from slugs.words import words


def slugify(text):
    return "-".join(words(text)).strip("-")
