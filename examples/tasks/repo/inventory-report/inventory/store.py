from inventory.parser import parse_lines


class Store:
    def __init__(self, lines):
        self.counts = {}
        for name, count in parse_lines(lines):
            self.counts[name] = self.counts.get(name, 0) + count

    def names(self):
        return sorted({name.lower() for name in self.counts})
