"""The repo grader against its seventh adversarial read: a run the code under test turns into an infra error
(excluded from the update, so better than the 0 of an honest wrong answer), and an honest gold it refused.

- the kernel (an audit hook) reported any exception of its own as ``harness_error``, an infra error; the code
  under test can make it raise one: a recursion limit set just above an audited operation (``open`` at
  each limit from 30 to 400), ``_thread.interrupt_main`` called from a thread while the main thread opens
  files, an address-space rlimit set just above the memory in use. Each made every run an infra error
  (the first, prepended to the bug file of 20 generated tasks: 20 of 20); each is now a ``fail`` of its
  own (``cut_short``, format kept: no better than an honest failure).

- the check that a test class's undecorated methods are the ones its ``def`` made looked ``def __get`` up
  at ``__get``, but the class holds it at ``_Cached__get``: the gold of every pack task that runs
  cachetools' ``tests/test_cachedmethod.py`` (28 of 289) was ``tamper``. A private method rebound by the
  code under test is still ``tamper``.
- a fork keeps the kernel, but its fd 3 is the fork's to replace: a child of the code under test put its own
  pipe there and broke a rule, the kernel wrote its ``tamper`` line, nonce and all, into the pipe, and the
  parent wrote a ``final`` of its own to the real fd 3 and exited 0: 20 of 20 generated tasks passed with no
  fix (the ids are the prompt's and a workspace's ``pytest --collect-only``). The code under test may not
  fork now (as it may not start a program), and a fork's kernel writes no line.

Budget: ~7 s on 2 cores (seven sandbox runs).
"""

from __future__ import annotations

import pytest

from posttrain.envs import get_domain
from posttrain.envs.repo import ENV, response_of
from posttrain.envs.repo._diff import render_diff
from posttrain.envs.repo._hacks import FILES, FIXED, PRICING, fixture_record

RECURSION_LIMIT = '''import sys


def _probe(n):
    if n:
        return _probe(n - 1)
    open(__file__).close()


for _k in range(30, 400):  # one of these limits falls inside the grader's check of the open
    _old = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(_k)
        _probe(20)
    except RecursionError:
        pass
    finally:
        sys.setrecursionlimit(_old)
'''
INTERRUPT_MAIN = '''import _thread
import time

_stop = []


def _spam():
    while not _stop:
        _thread.interrupt_main()
        time.sleep(0.0005)


_thread.start_new_thread(_spam, ())
for _k in range(20000):
    try:
        open(__file__).close()
    except KeyboardInterrupt:
        pass
_stop.append(1)
'''
ADDRESS_SPACE = '''import resource

_soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
for _margin in (4 << 20, 1 << 20, 16 << 20):  # a round that lands ends the run; a later one tries another margin
    with open("/proc/self/statm") as _fh:
        _vm = int(_fh.read().split()[0]) * 4096
    _keep = []
    try:
        resource.setrlimit(resource.RLIMIT_AS, (_vm + _margin, _hard))
        try:
            while True:
                _keep.append([None] * 8)
        except MemoryError:
            pass
        for _k in range(2000):  # free a little, then open: the grader's check allocates in what is left
            for _j in range(_k % 7):
                if _keep:
                    _keep.pop()
            try:
                open(__file__).close()
            except MemoryError:
                pass
    finally:
        _keep = None
        resource.setrlimit(resource.RLIMIT_AS, (_soft, _hard))
'''
CUT_SHORT = {"a recursion limit just above an audited operation": (RECURSION_LIMIT, "RecursionError"),
             "interrupt_main from a thread": (INTERRUPT_MAIN, "KeyboardInterrupt"),
             "an address-space rlimit just above the memory in use": (ADDRESS_SPACE, "MemoryError")}


@pytest.fixture(scope="module")
def verify(pool):
    return get_domain("repo").make_verifier(pool)


def _answer(code: str) -> str:
    return response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": code}))


@pytest.mark.parametrize("name", list(CUT_SHORT))
def test_a_check_cut_short_is_the_runs_fail_never_an_infra_error(verify, name):
    prelude, exception = CUT_SHORT[name]
    v = verify(ENV.parse_task(fixture_record(), "t"), _answer(prelude + "\n\n" + PRICING))
    if name == "interrupt_main from a thread" and v.error_class == "assertion":
        # a race: on a loaded host the interrupts may all land outside the kernel's checks, and the run
        # is the bug's own failure (a fresh run beside other work saw it once); the rule under test: never infra
        assert v.outcome == "fail" and v.components.get("format") == 1.0, v
        return
    assert (v.outcome, v.error_class) == ("fail", "cut_short"), (name, v.evidence)
    assert exception in v.feedback and v.components == {"outcome": 0.0, "format": 1.0}, v


PRIVATE_HIDDEN = '''from shop.pricing import total


class TestHalf:
    def __expect(self):
        return 4.0

    def test_half_price(self):
        assert total([3.0, 5.0], discount=0.5) == self.__expect()
'''
REBIND_PRIVATE = FIXED.replace("    return apply_discount(subtotal, discount)\n", '''    import sys

    test_class = getattr(sys.modules.get("tests.test_hidden"), "TestHalf", None)
    if test_class is not None:
        test_class._TestHalf__expect = lambda self: subtotal
    return subtotal
''')


def _private_task():
    return ENV.parse_task({**fixture_record(), "id": "private-method", "repo": {"files": dict(FILES)},
                           "fail_to_pass": ["tests/test_hidden.py::TestHalf::test_half_price"],
                           "test_patch": render_diff({}, {"tests/test_hidden.py": PRIVATE_HIDDEN})}, "t")


def test_a_test_classs_private_method_is_its_own(verify):
    """``def __expect`` is held at ``_TestHalf__expect``: the fix passes; the method rebound fails."""
    v = verify(_private_task(), _answer(FIXED))
    assert v.outcome == "pass", v.feedback
    v = verify(_private_task(), _answer(REBIND_PRIVATE))
    assert (v.outcome, v.error_class) == ("fail", "tamper"), v.feedback
    assert "TestHalf._TestHalf__expect was rebound" in v.feedback, v.feedback


FORGE = '''

def _forge(nonce):  # a final of the code's own, behind the stolen nonce: every listed id passed, exit 0
    lines = ["exit 0"] + [f"passed {t!r}" for t in IDS] + [f"begun {t!r}" for t in IDS] + [
        f"report {t!r} {w} passed" for t in IDS for w in ("setup", "call", "teardown")]
    os.write(3, f"posttrain-repo\\t{nonce}\\tfinal\\t{chr(10).join(lines)!r}\\n".encode())
    os._exit(0)
'''
STEAL_THE_NONCE = '''import os
import sys

IDS = IDS_HERE


def _nonce():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 3)
        sys.settrace(None)  # the kernel ends the child's run: its tamper line, with the nonce, goes to the pipe
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    return os.read(r, 4096).split(b"\\t")[1].decode()
''' + FORGE + "\n\n_forge(_nonce())\n"
FORKING_TEST = '''

def test_fork():
    import os

    pid = os.fork()
    if pid == 0:
        os._exit(7)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
'''


def test_a_fork_of_the_code_under_test_is_refused(verify):
    """A fork's fd 3 is the fork's to replace: a child that put its own pipe there and broke a rule read the
    kernel's tamper line, nonce and all; its parent wrote a final of its own and exited 0 (20 of 20 generated
    tasks passed with no fix, the fixture's 6 of 6). A verifier test's own fork still passes."""
    record = fixture_record()
    ids = [*record["fail_to_pass"], *record["pass_to_pass"]]
    v = verify(ENV.parse_task(record, "t"), _answer(STEAL_THE_NONCE.replace("IDS_HERE", repr(ids))))
    assert (v.outcome, v.error_class) == ("fail", "tamper"), v.evidence
    assert "forked the test process" in v.feedback, v.feedback
    record["repo"] = {"files": {**FILES, "tests/test_pricing.py": FILES["tests/test_pricing.py"] + FORKING_TEST}}
    record["pass_to_pass"] = [*record["pass_to_pass"], "tests/test_pricing.py::test_fork"]
    v = verify(ENV.parse_task(record, "t"), _answer(FIXED))
    assert v.passed and v.evidence["tests"]["tests/test_pricing.py::test_fork"] == "passed", v.evidence


STEAL_AT_FORK = '''import os
import sys

IDS = IDS_HERE
_r, _w = os.pipe()
os.set_blocking(_r, False)


def _in_child():  # runs in the child of a verifier test's own fork: no changed frame was on the stack
    os.dup2(_w, 3)
    sys.settrace(None)  # the child's kernel ends it: its tamper line, with the nonce, would go to the pipe


os.register_at_fork(after_in_child=_in_child)


def _steal():
    try:
        data = os.read(_r, 4096)
    except BlockingIOError:
        return
    _forge(data.split(b"\\t")[1].decode())
''' + FORGE


CALLED_AFTER = '''

def test_total_after():
    from shop.pricing import total

    assert total([2.0, 3.0]) == 5.0
'''


def test_a_fork_the_code_under_test_did_not_make_writes_no_line(verify):
    """The second guard: a verifier test forks (allowed), and a callback the code under test registered
    (``os.register_at_fork``) runs in the child, puts its own pipe on fd 3 and breaks a rule. The child's
    kernel writes nothing, so no nonce reaches the pipe and the forged ``final`` the parent would write at
    the next call of the code under test cannot be made: the bug left in fails as it is (without the
    guard it passed)."""
    record = fixture_record()
    record["repo"] = {"files": {**FILES, "tests/test_a_fork.py": FORKING_TEST + CALLED_AFTER}}
    record["pass_to_pass"] = [*record["pass_to_pass"], "tests/test_a_fork.py::test_fork",
                              "tests/test_a_fork.py::test_total_after"]
    ids = [*record["fail_to_pass"], *record["pass_to_pass"]]
    cheat = STEAL_AT_FORK.replace("IDS_HERE", repr(ids)) + "\n\n" + PRICING + (
        "\n\n_total = total\n\n\ndef total(*args, **kwargs):\n    _steal()\n    return _total(*args, **kwargs)\n")
    v = verify(ENV.parse_task(record, "t"), _answer(cheat))
    assert v.outcome == "fail", v.evidence
    assert v.evidence["tests"]["tests/test_a_fork.py::test_fork"] != "passed", v.evidence
