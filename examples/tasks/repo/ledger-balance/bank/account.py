from bank.errors import InsufficientFunds
from bank.ledger import Ledger


class Account:
    def __init__(self):
        self.ledger = Ledger()

    def deposit(self, amount):
        self.ledger.record(amount)

    def withdraw(self, amount):
        if amount > self.balance():
            raise InsufficientFunds(f"balance {self.balance()} < {amount}")
        self.ledger.record(-amount)

    def balance(self):
        return self.ledger.total()
