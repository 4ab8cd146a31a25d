"""Read stock lines of the form 'name, count'."""


def normalize(name):
    return name.strip()


def parse_lines(lines):
    items = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, count = line.split(",")
        items.append((normalize(name), int(count)))
    return items
