class Ledger:
    def __init__(self):
        self.entries = []

    def record(self, amount):
        self.entries.append(amount)

    def total(self):
        return sum(self.entries[:-1])
