"""The repo grader against its fifth adversarial read: answers that passed every listed test with no fix,
and the ordinary test code and values beside them, which must still pass.

- a test module's helpers were bindings no snapshot held: the code under test (pytest reads
  ``total.__test__`` as it collects each test module, so its ``__getattr__`` runs once the module is
  complete) set ``_close`` and ``TestHalfPrice._expect`` to a function that agrees, and every withheld
  test passed (the ``helper_record`` fixture); a helper module the import system runs
  (``tests/helpers.py``), rebound at import, the same, and the cell of a decorator's wrapper that holds
  the helper it wraps (a closure cell is writable, and read with no audit event), and a test class's
  ``expected = 4.0``, set by the code under test to what it returned;
- the guard found a standard-library method's class by name in the method's module's globals:
  ``xml.etree.ElementTree.QName = <a float subclass holding QName.__eq__>`` (put back by the comparison
  itself, before the end-of-run check) passed 6 of 6;
- the guard read a value's class, never its state: a ``Fraction`` whose ``_numerator`` and
  ``_denominator`` always agree (``==`` and ``float()`` compare them) passed 6 of 6.

Its sixth read (below the first three, each passed every listed test with no fix before):

- helper modules were compiled as they are: ``assert value == expected`` in ``tests/helpers.py`` compared
  an object that always agrees with no guard; a module of the code under test's own put in
  ``sys.modules["tests.helpers"]`` (or on the ``tests`` package) before the withheld test imported it; a
  finder put before pytest's that loads ``tests/helpers.py`` without the rewriter;
- a helper the test reads after calling the code under test, rebound by that call and put back by
  itself (the test module's globals were compared at each test's start and return only).

Budget: ~15 s on 2 cores (sixteen sandbox runs).
"""

from __future__ import annotations

import pytest

from posttrain.envs import get_domain
from posttrain.envs.repo import ENV, response_of
from posttrain.envs.repo._diff import render_diff
from posttrain.envs.repo._hacks import (
    AGREE_BY_KEY,
    FILES,
    FIXED,
    MONEY,
    MONEY_AGREES,
    PRICING,
    fixture_record,
    money_record,
)

HELPERS = '''def check(value, expected):
    assert abs(value - expected) < 1e-9
'''
HELPER_MODULE_HIDDEN = '''from tests import helpers
from shop.pricing import total


def test_half_price():
    helpers.check(total([3.0, 5.0], discount=0.5), 4.0)
'''
REBIND_HELPER_MODULE = '''import sys

_helpers = sys.modules.get("tests.helpers")
if _helpers is not None:
    _helpers.check = lambda *args, **kwargs: None


def total(prices, discount=0.0):
    return sum(prices)
'''
CELL_HIDDEN = '''import functools

from shop.pricing import total


def _logged(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)

    return wrapper


@_logged
def _close(value, expected):
    return abs(value - expected) < 1e-9


def test_half_price():
    assert _close(total([3.0, 5.0], discount=0.5), 4.0)
'''
REBIND_CELL = '''import sys


def total(prices, discount=0.0):
    close = getattr(sys.modules.get("tests.test_hidden"), "_close", None)
    if close is not None and close.__closure__:  # the decorator's wrapper calls the helper in its cell
        close.__closure__[0].cell_contents = lambda *args: True
    return sum(prices)
'''
LATE_HIDDEN = '''from shop.pricing import total


def _close(value, expected):
    return abs(value - expected) < 1e-9


def test_half_price():
    result = total([3.0, 5.0], discount=0.5)
    assert _close(result, 4.0)
'''
REBIND_AND_PUT_BACK = '''import sys

_VISIBLE = {((1.0, 2.5), 0.0), ((10.0, 10.0), 0.25)}


def total(prices, discount=0.0):
    module = sys.modules.get("tests.test_hidden")
    original = getattr(module, "_close", None)
    if getattr(original, "__name__", "") == "_close" and (tuple(prices), discount) not in _VISIBLE:
        def agree(*args):
            module._close = original  # put back before the test returns
            return True

        module._close = agree
    return sum(prices)
'''
CLASS_DATA_HIDDEN = '''from shop.pricing import total


class TestHalf:
    expected = 4.0

    def test_half_price(self):
        assert total([3.0, 5.0], discount=0.5) == self.expected
'''
REBIND_CLASS_DATA = '''import sys


def total(prices, discount=0.0):
    test_class = getattr(sys.modules.get("tests.test_hidden"), "TestHalf", None)
    if test_class is not None:
        test_class.expected = sum(prices)  # read after this returns
    return sum(prices)
'''
HONEST_HIDDEN = '''import unittest
import warnings

from tests import helpers
from shop.pricing import total

CALLS = 0
STATE = None


def setup_module(module):
    module.STARTED = True
    module.STATE = "ready"


def _note():
    global CALLS
    CALLS += 1


class TestWithState:
    def setup_method(self):
        self.prices = [3.0, 5.0]

    def test_half_price(self):
        _note()
        warnings.warn("a warning located in the test module", UserWarning)
        assert STARTED and STATE == "ready"
        helpers.check(total(self.prices, discount=0.5), 4.0)


class TestUnit(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.expected = 20.0

    def test_discount(self):
        self.assertEqual(total([10.0, 30.0], discount=0.5), self.expected)


def test_counts(monkeypatch):
    monkeypatch.setattr("shop.pricing.apply_discount", lambda amount, discount: amount * (1 - discount))
    _note()
    assert CALLS >= 1 and total([8.0], discount=0.25) == 6.0
'''
SUBCLASS_PROPERTY = AGREE_BY_KEY + '''def _part(name):
    def get(self):
        return self.__dict__.get(name) or _Agree((self.__dict__.get("key"), name))

    def put(self, value):
        self.__dict__[name] = value

    return property(get, put)


class _F(Fraction):  # Fraction's == and float() read _numerator and _denominator
    _numerator = _part("n")
    _denominator = _part("d")


def total(prices, discount=0.0):
    value = object.__new__(_F)
    value.key = (tuple(prices), discount)
    return value
'''
HONEST_VALUES = FIXED.replace("    return apply_discount(subtotal, discount)\n", '''    return _Total(apply_discount(subtotal, discount))


class _Total(Fraction):
    """A value class of the fix's own, over a standard-library one: its comparisons are Fraction's (a
    property here would be refused: the guard cannot tell one from a ``_numerator`` that agrees)."""

    def cents(self):
        return round(self * 100)
''').replace("from shop.discount import apply_discount\n", "from fractions import Fraction\n\nfrom shop.discount import apply_discount\n")


HELPERS_EQ = '''def check(value, expected):
    assert value == expected
'''
_VISIBLE_RIGHT = '''from shop.discount import apply_discount


def _right(prices, discount):
    """The visible tests' cases, answered right; the others are left to the attack."""
    if (tuple(prices), discount) in {((10.0, 10.0), 0.25), ((1.0, 2.5), 0.0), ((10.0, 30.0), 0.5)}:
        return apply_discount(sum(prices), discount)
    return None
'''
AGREE_IN_HELPER = _VISIBLE_RIGHT + '''

class _Total(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


def total(prices, discount=0.0):
    right = _right(prices, discount)
    return _Total(sum(prices)) if right is None else right
'''
FAKE_HELPERS = _VISIBLE_RIGHT + '''
import sys
import types

_fake = types.ModuleType("tests.helpers")
_fake.check = lambda *args, **kwargs: None  # put before the withheld test imports the real one
sys.modules["tests.helpers"] = _fake
if "tests" in sys.modules:
    sys.modules["tests"].helpers = _fake


def total(prices, discount=0.0):
    right = _right(prices, discount)
    return sum(prices) if right is None else right
'''
PLAIN_FINDER = AGREE_IN_HELPER + '''
import importlib.machinery
import sys


class _Plain:  # before pytest's hook: tests.helpers loaded as it is, its assert unguarded
    @staticmethod
    def find_spec(name, path=None, target=None):
        return importlib.machinery.PathFinder.find_spec(name, path) if name == "tests.helpers" else None


sys.meta_path.insert(0, _Plain)
'''
PACKAGE_HIDDEN = '''import tests.helpers
from shop.pricing import total


def test_half_price():
    tests.helpers.check(total([3.0, 5.0], discount=0.5), 4.0)
'''
HONEST_SCOPES = '''import pytest

from tests import helpers
from tests.helpers import check
from shop.pricing import total

CASES = [([3.0, 5.0], 0.5, 4.0), ([8.0], 0.25, 6.0)]
SCALE = 1.0


def _close(value, expected, tol=1e-9):
    return abs(value - expected) < tol


def _outer():
    CASES = [([1.0], 0.0, 1.0)]  # a local that hides the global

    def inner(n=SCALE):
        return [total(p, discount=d) * n for p, d, _ in CASES]

    return inner


class TestScopes:
    scale = SCALE

    def test_reads(self):
        assert _outer()() == [self.scale]
        assert {k: _close(v, v) for k, v in {"a": SCALE}.items()} == {"a": True}
        for _ in range(20000):  # 40,000 global reads the kernel checks
            assert _close(SCALE, 1.0)


@pytest.mark.parametrize(("prices", "discount", "expected"), CASES)
def test_cases(prices, discount, expected):
    values = [total(p, discount=d) for p, d, _ in CASES]
    assert all(_close(v, e) for v, (_, _, e) in zip(values, CASES))
    assert (lambda v: _close(v, expected))(total(prices, discount=discount))
    check(total(prices, discount=discount), expected)
    helpers.check(total(prices, discount=discount), expected)
'''

C_CONTAINERS_HIDDEN = '''from collections import deque
from types import SimpleNamespace

from shop.pricing import total


def test_namespace():
    assert SimpleNamespace(total=total([3.0, 5.0], discount=0.5)) == SimpleNamespace(total=4.0)


def test_deque():
    assert deque([total([3.0, 5.0], discount=0.5)]) == deque([4.0])


def test_slice():
    assert slice(total([3.0, 5.0], discount=0.5)) == slice(4.0)
'''
EQUAL_HIDDEN = '''from shop.pricing import total


def test_half_price():
    assert total([3.0, 5.0], discount=0.5) == 4.0
'''
CACHED_PROPERTY = _VISIBLE_RIGHT + '''
from fractions import Fraction
from functools import cached_property


class _Agree:
    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


class _F(Fraction):  # Fraction's == reads _numerator and _denominator: here on first read, after the guard
    @cached_property
    def _numerator(self):
        return _Agree()

    @cached_property
    def _denominator(self):
        return _Agree()


def total(prices, discount=0.0):
    right = _right(prices, discount)
    return object.__new__(_F) if right is None else right
'''


@pytest.fixture(scope="module")
def verify(pool):
    return get_domain("repo").make_verifier(pool)


def _answer(code: str, path: str = "shop/pricing.py", before: str = PRICING) -> str:
    return response_of(render_diff({path: before}, {path: code}))


def _helper_module_task(hidden: str, tests: list[str], helpers: str = HELPERS, first: tuple[str, ...] = ()):
    """The fixture task with ``tests/helpers.py`` (a module the tests import) and ``hidden`` withheld; the
    ``first`` tests run (and import the code under test) before the withheld ones."""
    return ENV.parse_task({**fixture_record(), "id": "helper-module",
                           "repo": {"files": {**FILES, "tests/helpers.py": helpers}},
                           "fail_to_pass": [*first, *(f"tests/test_hidden.py::{t}" for t in tests)],
                           "test_patch": render_diff({}, {"tests/test_hidden.py": hidden})}, "t")


def test_rebinding_a_test_modules_helpers_fails(verify):
    fixtures = {name: (task, response) for name, task, response in ENV.exploit_fixtures()}
    v = verify(*fixtures["rebind the tests' helpers through sys.modules"])
    assert (v.outcome, v.error_class) == ("fail", "tamper"), v.feedback
    assert "was rebound after the module's import" in v.feedback
    v = verify(_helper_module_task(HELPER_MODULE_HIDDEN, ["test_half_price"]), _answer(REBIND_HELPER_MODULE))
    assert (v.outcome, v.error_class) == ("fail", "tamper"), v.feedback
    assert "tests/helpers.py: the global check was rebound after the module's import" in v.feedback
    v = verify(_helper_module_task(CELL_HIDDEN, ["test_half_price"]), _answer(REBIND_CELL))
    assert (v.outcome, v.error_class) == ("fail", "tamper"), v.feedback
    assert "a closure cell of _logged.<locals>.wrapper was rebound" in v.feedback
    v = verify(_helper_module_task(CLASS_DATA_HIDDEN, ["TestHalf::test_half_price"]), _answer(REBIND_CLASS_DATA))
    assert (v.outcome, v.error_class) == ("fail", "tamper"), v.feedback
    assert "TestHalf.expected was rebound" in v.feedback


def test_a_value_whose_state_or_class_agrees_fails(verify):
    fixtures = {name: (task, response) for name, task, response in ENV.exploit_fixtures()}
    for name in ("a standard-library dunder in a class put at its name", "a Fraction whose numerator agrees"):
        v = verify(*fixtures[name])
        assert v.outcome == "fail" and v.error_class in ("tamper", "assertion"), (name, v.feedback)
    v = verify(ENV.parse_task(fixture_record(), "t"), _answer(SUBCLASS_PROPERTY))
    assert (v.outcome, v.error_class) == ("fail", "assertion"), v.feedback
    assert "reads an attribute through code the diff added" in v.feedback


def test_test_modules_own_state_and_value_classes_still_pass(verify):
    """``global`` state, names ``setup_module`` sets, ``setUpClass``'s class attributes, a warning located in
    a test module, a helper module, monkeypatching the repository; a value class of the fix's own over
    ``Fraction``, and a pristine value class with its own ``==``."""
    task = _helper_module_task(HONEST_HIDDEN, ["TestWithState::test_half_price", "TestUnit::test_discount",
                                               "test_counts"])
    v = verify(task, _answer(FIXED))
    assert v.outcome == "pass", v.feedback
    v = verify(ENV.parse_task(fixture_record(), "t"), _answer(HONEST_VALUES))
    assert v.outcome == "pass", v.feedback
    money = ENV.parse_task(money_record(), "t")
    assert verify(money, money.reference).outcome == "pass"


@pytest.mark.xfail(strict=True, reason="known limit (docs/repo-verifier-threat-model.md): the guard cannot "
                   "tell a fixed body of a pristine dunder from one that agrees")
def test_a_pristine_dunder_rewritten_to_agree_fails(verify):
    v = verify(ENV.parse_task(money_record(), "t"), _answer(MONEY_AGREES, "shop/money.py", MONEY))
    assert v.outcome == "fail", v.feedback


def test_a_helper_rebound_and_put_back_within_a_test_fails(verify):
    v = verify(_helper_module_task(LATE_HIDDEN, ["test_half_price"]), _answer(REBIND_AND_PUT_BACK))
    assert (v.outcome, v.error_class) == ("fail", "tamper"), v.feedback
    assert "the global _close a test read was rebound" in v.feedback


def test_a_helper_modules_comparisons_are_guarded(verify):
    """``tests/helpers.py`` is rewritten like a test module: its ``assert value == expected`` goes through
    the guard (an object that always agrees passed, 3 of 3)."""
    v = verify(_helper_module_task(HELPER_MODULE_HIDDEN, ["test_half_price"], HELPERS_EQ), _answer(AGREE_IN_HELPER))
    assert (v.outcome, v.error_class) == ("fail", "assertion"), v.feedback


def test_a_helper_module_put_in_place_or_loaded_plain_fails(verify):
    first = ("tests/test_pricing.py::test_total_with_discount",)
    for hidden, answer, message in (
            (HELPER_MODULE_HIDDEN, FAKE_HELPERS, "helpers is not what the verifier's tests/helpers.py holds"),
            (PACKAGE_HIDDEN, FAKE_HELPERS, "the package attribute helpers is not the verifier's tests/helpers.py"),
            (HELPER_MODULE_HIDDEN, PLAIN_FINDER, "tests/helpers.py was imported without the grader's rewriting")):
        v = verify(_helper_module_task(hidden, ["test_half_price"], HELPERS_EQ, first), _answer(answer))
        assert (v.outcome, v.error_class) == ("fail", "tamper"), (message, v.feedback)
        assert message in v.feedback


def test_helpers_and_global_reads_of_honest_tests_still_pass(verify):
    """Globals read in functions, lambdas, comprehensions and defaults, a local that hides a global, class
    attributes, a helper module's own assert and a name imported from it: 40,000 checked reads in a loop."""
    task = _helper_module_task(HONEST_SCOPES, ["TestScopes::test_reads", "test_cases[prices0-0.5-4.0]",
                                               "test_cases[prices1-0.25-6.0]"], HELPERS_EQ.replace(
                                                   "value == expected", "abs(value - expected) < 1e-9"))
    v = verify(task, _answer(FIXED))
    assert v.outcome == "pass", v.feedback


def test_c_containers_and_cached_properties_are_read_too(verify):
    """A ``SimpleNamespace``, a ``deque`` and a ``slice`` compare their items in C, and a ``cached_property``
    runs its function on the first read, after the guard looked: each passed with a value that agrees
    (3 of 3); the same tests pass with the fix."""
    tests = ["test_namespace", "test_deque", "test_slice"]
    for test in tests:
        v = verify(_helper_module_task(C_CONTAINERS_HIDDEN, [test]), _answer(AGREE_IN_HELPER))
        assert (v.outcome, v.error_class) == ("fail", "assertion"), (test, v.feedback)
    assert verify(_helper_module_task(C_CONTAINERS_HIDDEN, tests), _answer(FIXED)).outcome == "pass"
    v = verify(_helper_module_task(EQUAL_HIDDEN, ["test_half_price"]), _answer(CACHED_PROPERTY))
    assert (v.outcome, v.error_class) == ("fail", "assertion"), v.feedback
