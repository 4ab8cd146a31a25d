import pytest

from bank.account import Account
from bank.errors import InsufficientFunds


def test_deposit():
    a = Account()
    a.deposit(10)
    assert a.balance() == 10


def test_withdraw():
    a = Account()
    a.deposit(10)
    a.withdraw(4)
    assert a.balance() == 6


def test_overdraw():
    a = Account()
    with pytest.raises(InsufficientFunds):
        a.withdraw(1)
