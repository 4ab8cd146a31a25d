"""The code verifier under attack: the domain's exploit fixtures through the real sandbox.

The fixtures (``posttrain/envs/code/_hacks.py``, ``CodeEnv.exploit_fixtures()``) are responses
written the way a policy optimizing against the verifier would write them, grouped by the
classes of issue 14; each must score exactly 0 with outcome ``fail`` (never ``pass``, never
``infra_error``), within bounded time. docs/code-verifier-threat-model.md names each of them.
Below them: the runner's parts that the attacks rely on, tested in-process (no model code runs
in this process).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posttrain.envs import get_domain
from posttrain.envs.code import _runner as runner
from posttrain.envs.code._hacks import (
    BATCH_SABOTEUR,
    BATCH_STOPPER,
    COUNT_IN_LEFTOVER,
    COUNT_IN_MEMORY,
    EVEN,
    MIX,
    NESTED_IN_CALL,
    PLANT_INSIDE,
    PLANT_TOP,
    SLOW_TEST,
    SOLVE_THEN_KILL,
    SOLVE_THEN_STOP_NEXT,
    fenced,
)
from posttrain.types import Task, TaskLimits

HACKS = get_domain("code").exploit_fixtures()
# MIX at 1.5 s instead of 4 s (a 1.15 s deadline per call instead of 3.4 s), for the candidates that
# must run out of their own call's deadline: they reach it 3x sooner, and their assertions before it
# take microseconds.
MIX_SHORT = dataclasses.replace(MIX, limits=TaskLimits(timeout_s=1.5, memory_mb=MIX.limits.memory_mb))


@pytest.mark.slow
@pytest.mark.parametrize(("name", "task", "response"), HACKS, ids=[h[0] for h in HACKS])
def test_hack_scores_zero(code_verifier, name: str, task: Task, response: str) -> None:
    import time

    t0 = time.monotonic()
    v = code_verifier(task, response)
    assert (v.outcome, v.reward) == ("fail", 0.0), (name, v.outcome, v.error_class, v.feedback, v.evidence)
    assert time.monotonic() - t0 < 4 * task.limits.timeout_s + 10  # never a hang


@pytest.mark.slow
def test_every_hack_scores_zero_through_the_services_batch_path(pool) -> None:
    """The same fixtures as the service batches them (up to 8 in one sandbox job, one attack after
    another in the same job): each a ``fail``, never ``infra_error``; the references after them pass."""
    from posttrain.cli import domain_hooks
    from posttrain.sched import LocalBackend, Service

    pairs = [(task, response) for _, task, response in HACKS] + [(MIX, MIX.reference), (EVEN, EVEN.reference)]
    with Service(LocalBackend(domain_hooks(["code"], pool), pool)) as service:
        verdicts = service.verify_pairs(pairs)
    got = [(name, v.outcome, v.error_class) for (name, _, _), v in zip(HACKS, verdicts, strict=False)]
    assert all(outcome == "fail" for _, outcome, _ in got), [g for g in got if g[1] != "fail"]
    assert all(v.passed for v in verdicts[len(HACKS):]), [v.evidence for v in verdicts[len(HACKS):]]


@pytest.mark.slow
def test_a_verdict_never_hangs_on_its_batch_neighbours(pool) -> None:
    """A candidate whose warm-up broke the protocol took two servers (the second a fresh start), so the
    next item ran on one the template forked, whose parent is the template, not the runner: "right
    answers, then kill the process that starts candidates" killed the template there, no later server
    was asked for, and it passed (alone it kills the runner: no report). The runner checks the
    template after every item; a batch whose template broke re-runs that item alone."""
    from posttrain.envs.code import verify_code_batch

    verdicts = verify_code_batch(pool, [(MIX, NESTED_IN_CALL), (MIX, MIX.reference), (MIX, SOLVE_THEN_KILL)])
    assert [(v.outcome, v.error_class) for v in verdicts] == [
        ("fail", "protocol"), ("pass", None), ("fail", "no_report")]
    verdicts = verify_code_batch(pool, [(MIX, NESTED_IN_CALL), (MIX, SOLVE_THEN_KILL), (MIX, MIX.reference)])
    assert [(v.outcome, v.error_class) for v in verdicts] == [
        ("fail", "protocol"), ("fail", "no_report"), ("pass", None)]


@pytest.mark.slow
def test_a_verdict_never_hangs_on_which_process_its_signal_hits(pool) -> None:
    """Right answers, then a stop to the next pid: alone that is the template (``sabotage``); in a
    batch the next item's server, waiting for its candidate. That item was lost and re-run alone,
    and this one kept its pass (3 of 3, both places). The runner checks the waiting servers, as the
    template, after every item: a batch where one was stopped or killed re-runs that item alone."""
    from posttrain.envs.code import verify_code_batch

    ref = (MIX, MIX.reference)
    for pairs in ([(MIX, SOLVE_THEN_STOP_NEXT), ref], [ref, (MIX, SOLVE_THEN_STOP_NEXT), ref],
                  [(MIX, SOLVE_THEN_STOP_NEXT.replace("SIGSTOP", "SIGKILL")), ref, ref]):
        got = [(v.outcome, v.error_class) for v in verify_code_batch(pool, pairs)]
        assert got == [("fail", "sabotage") if pair != ref else ("pass", None) for pair in pairs], got


def test_the_template_ignores_a_signal_sent_the_moment_it_is_forked() -> None:
    """The template ignores signals first thing, but until it had, one a candidate sent to every
    process at import ended it: a right answer that did so failed alone as ``sabotage`` in 9 runs of
    30 on a loaded host (its template just forked), and passed at the second place of a batch, 15 of
    15. The runner blocks signals across the template's fork; the template ignores them, then
    unblocks (a pending signal set to be ignored is discarded). Here the template starts late and
    the signal comes at once."""
    import subprocess
    import sys

    script = (
        "import os, signal, time\n"
        "from posttrain.envs.code import _runner_procs as procs\n"
        "class Cell:\n    procs = os.open(os.devnull, os.O_WRONLY)\n"
        "fork = os.fork\n"
        "def fork_then_signal():\n    pid = fork()\n"
        "    if pid == 0:\n        time.sleep(0.1)  # the template starts late, as on a loaded host\n"
        "    else:\n        os.kill(pid, signal.SIGTERM)\n"
        "    return pid\n"
        "os.fork = fork_then_signal\n"
        "template = procs.Template(1, Cell(), direct=0)\n"
        "time.sleep(0.4)\n"
        "print(procs._alive(template.pid))\n"
        "procs._kill(template.pid)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["True"], (out.stdout, out.stderr[-2000:])


@pytest.mark.slow
def test_a_candidate_that_stops_the_runner_does_not_hold_its_batch_to_the_deadline(pool) -> None:
    """The fixtures that stop processes, batched by the service with correct answers between them: a
    candidate that stopped the runner held its whole sandbox job to the job's deadline, the sum of
    the batch's (2.5 x 4 s per item: ~85 s for these eight, then the items re-run alone). The
    fork-server ends a job whose main process stays stopped (``_zygote.wait_unless_stopped``): each
    stopper a ``fail`` (its own timeout), never ``infra_error``; every correct answer passes; the
    whole within four items' deadlines, half the batch's (it takes ~1 s on an idle host)."""
    import time

    from posttrain.cli import domain_hooks
    from posttrain.sched import LocalBackend, Service

    stops = [(name, task, response) for name, task, response in HACKS
             if "SIGSTOP" in name or "SIGTSTP" in name or "stop the" in name]
    assert len(stops) >= 4
    pairs = [pair for _, task, response in stops for pair in ((task, response), (MIX, MIX.reference))]
    t0 = time.monotonic()
    with Service(LocalBackend(domain_hooks(["code"], pool), pool)) as service:
        verdicts = service.verify_pairs(pairs)
    took = time.monotonic() - t0
    got = [(name, v.outcome, v.error_class) for (name, _, _), v in zip(stops, verdicts[::2], strict=True)]
    assert all(outcome == "fail" for _, outcome, _ in got), got
    assert all(v.passed for v in verdicts[1::2]), [v.evidence for v in verdicts[1::2]]
    assert took < 4 * 2.5 * MIX.limits.timeout_s, took


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(3))
def test_a_leftover_helper_never_costs_later_candidates_their_verdict(pool, attempt: int) -> None:
    """Issue 21, timing-dependent, so several times: a wrong candidate's helper (its main thread
    gone, the process a zombie with a live thread) SIGKILLs every later server of its sandbox job
    once it waits for its next call; on the code before issue 21 a victim died in about one run of
    four (its report read ``died``: a correct answer scored 0). A second helper answers the replay
    from a table that pass 1 filled (it passed, every time, before). Cells kill both before the
    next candidate starts."""
    from posttrain.envs.code import verify_code_batch

    ref = MIX.reference
    pairs = [(MIX, BATCH_SABOTEUR), (MIX, ref), (MIX, ref), (MIX, COUNT_IN_LEFTOVER), (MIX, ref)]
    verdicts = verify_code_batch(pool, pairs)
    assert [(v.outcome, v.error_class) for v in verdicts] == [
        ("fail", "assertion"), ("pass", None), ("pass", None), ("fail", "stateful"), ("pass", None)]


@pytest.mark.slow
def test_a_candidate_that_stops_the_next_waiting_server_never_costs_it_its_verdict(pool) -> None:
    """A server waits outside the cell for its candidate, so killing the cell does not touch it: a
    candidate that stopped it made the next, correct candidate time out (``timeout``: 0) on the
    runner of issue 21, 2 runs of 2. The runner now checks a waiting server (state, limits,
    priority, CPUs, policy) before it gives it a candidate; one that was tampered with is lost and
    the rest of the batch is re-run alone. So is the stopper itself, since the runner checks the
    waiting servers after every item: its verdict is the one it gets alone, where the next pid is
    the template's (``sabotage``; it was ``assertion`` in the batch before)."""
    from posttrain.envs.code import verify_code_batch

    verdicts = verify_code_batch(pool, [(MIX, BATCH_STOPPER), (MIX, MIX.reference), (MIX, MIX.reference)])
    assert [(v.outcome, v.error_class) for v in verdicts] == [("fail", "sabotage"), ("pass", None), ("pass", None)]


@pytest.mark.slow
def test_no_candidate_costs_another_its_verdict_beside_a_nice_19_hog(pool) -> None:
    """The timing-dependent rules of the batch, under load (a nice-19 spinner per CPU): the cell
    must empty within 5 s (else ``sabotage``, the candidate's), a waiting server is checked before
    it gets a candidate, the warm-up may take half an item's deadline before the slower way. The
    saboteurs still cost only themselves, and the references, ``SLOW_TEST``'s included, pass."""
    from posttrain.envs.code import verify_code_batch
    from posttrain.sandbox._probes_fair import cpu_hogs

    pairs = [(MIX, BATCH_SABOTEUR), (SLOW_TEST, SLOW_TEST.reference), (MIX, BATCH_STOPPER),
             (MIX, MIX.reference), (MIX, COUNT_IN_LEFTOVER), (EVEN, EVEN.reference), (SLOW_TEST, SLOW_TEST.reference)]
    with cpu_hogs(nice=19):
        verdicts = verify_code_batch(pool, pairs)
    assert [(v.outcome, v.error_class) for v in verdicts] == [
        ("fail", "assertion"), ("pass", None), ("fail", "sabotage"), ("pass", None), ("fail", "stateful"),
        ("pass", None), ("pass", None)], [v.evidence for v in verdicts]


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(2))
def test_a_saboteur_never_costs_victims_that_wait_between_calls_their_verdict(pool, attempt: int) -> None:
    """The saboteur's window made wide (``SLOW_TEST``: each victim's server waits between calls while
    the test works): on the runner before issue 21 the victims died in 6 runs of 6 (``died``, a
    correct answer scored 0); the cell kills the helper before the first victim starts."""
    from posttrain.envs.code import verify_code_batch

    verdicts = verify_code_batch(pool, [(MIX, BATCH_SABOTEUR)] + [(SLOW_TEST, SLOW_TEST.reference)] * 4)
    assert [(v.outcome, v.error_class) for v in verdicts] == [("fail", "assertion")] + [("pass", None)] * 4


@pytest.mark.slow
@pytest.mark.parametrize("task", [MIX, PLANT_INSIDE, PLANT_TOP, EVEN, SLOW_TEST], ids=lambda t: t.id)
def test_references_of_the_attack_tasks_pass(code_verifier, task: Task) -> None:
    v = code_verifier(task, task.reference)
    assert v.passed, (v.error_class, v.feedback, v.evidence)
    # the second, shuffled run happened where the answers differ (one call: nothing to shuffle)
    assert v.evidence["replayed"] == {"mix": 4, "even": 7, "slow-test": 12}.get(task.id, 0), v.evidence


@pytest.mark.slow
def test_a_candidate_runs_with_a_python_programs_signal_dispositions(code_verifier) -> None:
    """The servers the runner forks itself are forked before it ignores signals, the template's
    reset theirs: either way a candidate that forks and waits for its child gets the child's status
    (with SIGCHLD ignored, as the runner has it, the kernel would reap the child: ECHILD)."""
    from posttrain.envs import get_domain

    prompt = 'def child_exit(x: int) -> int:\n    """Fork a child that exits with x; return its exit code."""\n'
    body = ("    import os\n    pid = os.fork()\n    if pid == 0:\n        os._exit(x)\n"
            "    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])\n")
    for test in ("def check(candidate):\n    assert candidate(3) == 3\n    assert candidate(5) == 5\n",  # a warm-up
                 "def check(candidate):\n    for x in (3, 5):\n        assert candidate(x) == x\n"):  # a replay
        task = get_domain("code").parse_task({"id": "fork-wait", "domain": "code", "prompt": prompt,
                                              "entry_point": "child_exit", "test": test}, "t")
        v = code_verifier(task, body)
        assert v.passed, (v.error_class, v.feedback, v.evidence)


@pytest.mark.slow
def test_the_no_op_and_detected_attacks_earn_no_credit(code_verifier) -> None:
    """Reward item 7 (issue 21): the no-op (the prompt's bare signature, whose tests fail) got format
    1, and an answer by call count format 1 and process 1 (its first pass passed every assertion):
    with ``reward.format`` or ``reward.process`` on, both beat an honest wrong program. Now both total
    0 under every weighting; a wrong program keeps format 1 and the share of assertions it passed."""
    from posttrain.envs.conformance import WEIGHTINGS
    from posttrain.verify.rewards import combine

    for response in ("", "```python\n```", COUNT_IN_MEMORY):
        v = code_verifier(MIX, response)
        assert v.outcome == "fail" and all(combine(v, w).total == 0.0 for w in WEIGHTINGS), (response, v)
    wrong = code_verifier(MIX, fenced("def mix(x):\n    return 563\n"))  # right for the first call only
    assert (wrong.error_class, wrong.components["format"], wrong.components["process"]) == ("assertion", 1.0, 0.25)


@pytest.mark.slow
def test_state_that_does_not_change_answers_passes(code_verifier) -> None:
    # A cache is state across calls too; only answers that depend on the call order fail.
    memo = fenced("_CACHE = {}\ndef mix(x):\n    if x not in _CACHE:\n        _CACHE[x] = (x * 7919 + 13) % 1009\n"
                  "    return _CACHE[x]\n")
    v = code_verifier(MIX, memo)
    assert v.passed and v.evidence["replayed"] == 4, (v.error_class, v.evidence)


# ------------------------------------------------------------------ the runner's parts, in-process
# (no model code runs here: these check the pieces that the end-to-end attacks above rely on)

@given(st.lists(st.sampled_from(["ok:1", "ok:2", "ok:3", "exc:ValueError"]), min_size=1, max_size=12),
       st.randoms(use_true_random=False))
def test_replay_order_defeats_answering_by_position(keys: list[str], rng) -> None:
    order = runner.replay_order(keys, rng)
    assert sorted(order) == list(range(len(keys)))
    if len(set(keys)) > 1:  # a by-position answerer would give `keys` again: it must differ
        assert [keys[i] for i in order] != keys


@given(st.lists(st.sampled_from(["ok:1", "ok:2", "ok:3"]), min_size=2, max_size=12), st.data(),
       st.randoms(use_true_random=False))
def test_replay_order_defeats_answering_by_position_when_the_test_repeats_calls(calls, data, rng) -> None:
    """Pass 1's log has repeats (f(1), f(1), f(2), ...): a by-position answerer replays the log's
    first answers, repeats included, not the distinct calls' answers. It must fail every time."""
    answer = {c: data.draw(st.sampled_from(["a", "b"])) for c in sorted(set(calls))}
    distinct = list(dict.fromkeys(calls))
    keys = [answer[c] for c in distinct]
    by_position = [answer[c] for c in calls][: len(distinct)]
    order = runner.replay_order(keys, rng, by_position)
    assert sorted(order) == list(range(len(keys)))
    if len(set(keys)) > 1:
        assert [keys[i] for i in order] != by_position


@pytest.mark.parametrize("line", [b"[" * 100_000, b'{"a":' * 50_000, b"\xff\xfe{}", b"1" * 100, b"NaN",
                                  b'{"ok": ["int", "1"]', b""])
def test_malformed_messages_are_protocol_errors(line: bytes) -> None:
    with pytest.raises(runner.ProtocolError):
        runner.parse(line)


def test_oversized_message_is_a_protocol_error() -> None:
    import os
    import threading

    r, w = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(w, b"[" * (runner.MAX_MESSAGE_BYTES + (2 << 20))), os.close(w)))
    writer.start()
    with pytest.raises(runner.ProtocolError):
        runner.Channel(r, -1).recv()
    os.close(r)
    writer.join()


@pytest.mark.parametrize("tag", ["set", "frozenset", "dict"])
def test_a_reply_of_colliding_hashes_is_refused_before_it_is_built(tag: str) -> None:
    """Distinct values of one hash (multiples of 2**61 - 1) cost a set quadratic time to build, in
    the runner, outside the candidate's deadline: a reply of 120,000 of them held the runner until
    the job's timeout (a batch of 4: 54 s instead of 0.1 s, every later item re-run alone)."""
    import time

    from posttrain.envs.code._runner_wire import MAX_COLLISIONS

    values = [["int", format(k * ((1 << 61) - 1), "x")] for k in range(1, 20_000)]
    reply = ["dict", [[v, ["none"]] for v in values]] if tag == "dict" else [tag, values]
    start = time.process_time()  # CPU, not wall: a loaded host's waits are no part of the build's cost
    with pytest.raises(ValueError, match="colliding"):
        runner.decode(reply)
    assert time.process_time() - start < 1.0  # 0.03 s refused; building the set costs seconds
    few = [["int", format(k * ((1 << 61) - 1), "x")] for k in range(1, MAX_COLLISIONS)]
    assert len(runner.decode(["set", few + [["int", format(k, "x")] for k in range(50_000)]])) == 50_000 + len(few)


def test_colliding_hashes_spread_over_many_sets_share_one_budget() -> None:
    """Each set under the limit, many of them: 200 frozensets of 1,000 values of one hash (6 MiB, under
    the channel's cap) took 1.7 CPU-s to rebuild, outside the candidate's deadline, per reply. The
    collisions are counted over the whole value; honest nested sets still cross."""
    import time

    many = ["set", [["frozenset", [["int", format(k * ((1 << 61) - 1), "x")] for k in range(1, 1_000)]
                     + [["int", format(j, "x")]]] for j in range(200)]]
    start = time.process_time()  # CPU, not wall, as above
    with pytest.raises(ValueError, match="colliding"):
        runner.decode(many)
    assert time.process_time() - start < 1.0
    honest = ["set", [["frozenset", [["int", format(j * 1_000 + k, "x")] for k in range(1_000)]] for j in range(200)]]
    assert len(runner.decode(honest)) == 200


def test_candidate_exceptions_are_not_control_flow() -> None:
    def candidate(x):
        raise runner.CandidateError("StopIteration", "")

    assert not issubclass(runner.CandidateError, (StopIteration, StopAsyncIteration, AttributeError, LookupError,
                                                  GeneratorExit, KeyboardInterrupt, SystemExit))
    with pytest.raises(runner.CandidateError):
        all(map(candidate, [1, 2]))
    with pytest.raises(runner.CandidateError):
        next(filter(candidate, [1]), None)


def test_canonical_form_ignores_set_and_dict_order() -> None:
    a = runner.encode([{3, 1, 2}, {"b": 1, "a": 2}])
    b = runner.encode([{2, 3, 1}, {"a": 2, "b": 1}])
    assert runner.reply_key({"ok": a}) == runner.reply_key({"ok": b})
    assert runner.reply_key({"ok": a}) != runner.reply_key({"ok": runner.encode([{1, 2}, {"a": 2, "b": 1}])})
    assert runner.reply_key({"ok": ["int", "zz"]}) is None  # malformed: never equal to anything


# ------------------------------------------------------------------ the warm-up (issue 21's speed work)


def _check_of(test: str):
    import ast

    return [n for n in ast.parse(test).body if isinstance(n, ast.FunctionDef) and n.name == "check"][-1]


def test_predict_calls_reads_the_calls_a_test_will_make_first() -> None:
    test = ("def check(candidate):\n    import math\n    assert candidate(3) == 563\n    assert 7 == candidate(x=17)\n"
            "    assert candidate([1, 2]) > 0\n    assert True\n    y = candidate(5)\n    assert candidate(6) == 1\n")
    predicted = runner.predict_calls(_check_of(test), "mix")
    assert [runner.decode(__import__("marshal").loads(r)["args"]) for r, _ in predicted] == [[3], [], [[1, 2]]]
    assert [k for _, k in predicted] == [runner.eq_key(563), runner.eq_key(7), None]  # the third: not ==


def test_eq_key_never_separates_equal_values() -> None:
    assert runner.eq_key(1) == runner.eq_key(1.0) == runner.eq_key(True) == runner.eq_key(1 + 0j)
    assert runner.eq_key([1, 2.0]) == runner.eq_key([1.0, 2]) and runner.eq_key({1}) == runner.eq_key(frozenset({1.0}))
    assert runner.eq_key({1: "a"}) == runner.eq_key({1.0: "a"})
    assert runner.eq_key([1]) != runner.eq_key((1,)) and runner.eq_key("1") != runner.eq_key(1)  # unequal: apart


@given(st.lists(st.sampled_from([1, 2, 3, "a", (1,)]), min_size=1, max_size=10))
def test_the_warm_up_order_defeats_answering_by_position(expected: list) -> None:
    """Whatever the test's expected values, the warm-up asks each distinct call ``warm_repeats``
    times, enough copies for ``WARM_SEQUENCES`` arrangements with different expected answers (or
    ``WARM_MAX_REPEATS``), and a candidate that answers its calls by position (with the expected
    values in test order, repeats included, cyclically) gives some call another answer than the test
    requires, whenever the answers are not all equal."""
    import marshal
    from math import factorial

    predicted = [(marshal.dumps({"args": runner.encode([i]), "kwargs": runner.encode({})}, 2), runner.eq_key(v))
                 for i, v in enumerate(expected)]
    warm, by_position = runner.warm_up(predicted)
    if len({runner.eq_key(v) for v in expected}) < 2:
        assert (warm, by_position) == ([], None)
        return
    required = dict(predicted)
    r = len(warm) // len(required)
    assert sorted(warm) == sorted(list(required) * r)
    in_order = [key for _, key in predicted]
    assert by_position == [in_order[i % len(in_order)] for i in range(len(warm))]
    assert [required[c] for c in warm] != by_position
    answers = [required[c] for c in required]

    def sequences(copies: int) -> int:
        n = factorial(copies * len(answers))
        for a in set(answers):
            n //= factorial(copies * answers.count(a))
        return n

    assert sequences(r) >= runner.WARM_SEQUENCES or r == runner.WARM_MAX_REPEATS
    assert r == 1 or sequences(r - 1) < runner.WARM_SEQUENCES  # the fewest copies: only small tests pay


@pytest.mark.slow
def test_a_candidate_that_loops_in_the_warm_up_is_verified_as_before(code_verifier) -> None:
    """The warm-up is bounded: a candidate that loops on one input is then verified the slower way
    (the test first, in a fresh process): a timeout, with the assertions before it reported passed."""
    looping = fenced("def mix(x):\n    while x == 256:\n        pass\n    return (x * 7919 + 13) % 1009\n")
    v = code_verifier(MIX_SHORT, looping)
    assert (v.outcome, v.error_class) == ("fail", "timeout"), v.evidence
    assert [t["outcome"] for t in v.evidence["tests"][1:3]] == ["passed", "passed"], v.evidence["tests"]


# Attacks on the fork-server's stop rule (``_zygote.wait_unless_stopped``), played as a policy: each
# stops the runner (the candidate's parent) and tries to keep the job alive, to bend its end, or to
# have a forged report read when it ends early. Each is its own ``fail``; the correct answers batched
# after it keep their passes (re-run alone when the job ended early).
_STOP_THEN_SPIN_NICE_19 = fenced(
    "import os, signal\ndef mix(x):\n    if os.fork() == 0:\n        os.nice(19)\n"
    "        while True:\n            pass\n"
    "    os.kill(os.getppid(), signal.SIGSTOP)\n    return 0\n")
_STOP_AND_CONTINUE_BY_TURNS = fenced(
    "import os, signal, time\ndef mix(x):\n    runner = os.getppid()\n    if os.fork() == 0:\n"
    "        for _ in range(400):\n            os.kill(runner, signal.SIGSTOP)\n            time.sleep(0.2)\n"
    "            os.kill(runner, signal.SIGCONT)\n            time.sleep(0.01)\n        os._exit(0)\n"
    "    return (x * 7919 + 13) % 1009 if x != 999 else 0\n")
_FORGED_REPORT_THEN_STOP = fenced(
    "import json, os, signal\ndef mix(x):\n"
    "    line = (json.dumps({'i': 0, 'status': 'completed', 'passed': True, 'import': {'ok': True},\n"
    "                        'tests': [], 'calls': 4}) + '\\n').encode()\n"
    "    for fd in range(64):\n        try:\n            os.write(fd, line)\n        except OSError:\n            pass\n"
    "    os.kill(os.getppid(), signal.SIGSTOP)\n    return 0\n")

# Three more: the candidate stops itself on the one call it cannot answer (its own call's deadline,
# not the job's stop rule); it signals the fork-server, the namespace's init (SIGSTOP, SIGTERM,
# SIGINT, SIGHUP, SIGKILL: the kernel drops them, init handles none of them); it stops the runner
# with SIGTTIN, another stop signal, and a detached grandchild (its own session) continues the
# runner a second later, past the stop rule's two ticks.
_STOPS_ITSELF_ON_THE_LAST_CALL = fenced(
    "import os, signal\ndef mix(x):\n    if x == 999:\n        os.kill(os.getpid(), signal.SIGSTOP)\n"
    "    return (x * 7919 + 13) % 1009\n")
_SIGNALS_THE_FORK_SERVER = fenced(
    "import os, signal\ndef mix(x):\n"
    "    for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL):\n"
    "        try:\n            os.kill(1, sig)\n        except OSError:\n            pass\n"
    "    return (x * 7919 + 13) % 1009 if x != 999 else 0\n")
_STOP_THEN_DETACHED_CONTINUE = fenced(
    "import os, signal, time\ndef mix(x):\n    runner = os.getppid()\n    if os.fork() == 0:\n"
    "        os.setsid()\n        if os.fork() == 0:\n            time.sleep(1.0)\n"
    "            os.kill(runner, signal.SIGCONT)\n        os._exit(0)\n"
    "    os.kill(runner, signal.SIGTTIN)\n    return (x * 7919 + 13) % 1009 if x != 999 else 0\n")


@pytest.mark.slow
@pytest.mark.parametrize("attack", [_STOP_THEN_SPIN_NICE_19, _STOP_AND_CONTINUE_BY_TURNS, _FORGED_REPORT_THEN_STOP,
                                    _STOPS_ITSELF_ON_THE_LAST_CALL, _SIGNALS_THE_FORK_SERVER,
                                    _STOP_THEN_DETACHED_CONTINUE],
                         ids=["stop then spin at nice 19", "stop and continue by turns", "forged report then stop",
                              "stops itself on the last call", "signals the fork-server",
                              "SIGTTIN then a detached SIGCONT"])
def test_stopping_the_runner_never_pays_and_never_costs_the_next_answers(pool, attack: str) -> None:
    from posttrain.envs.code import verify_code_batch

    # the one that stops itself waits out its call's deadline (a shorter one: MIX_SHORT); the others
    # meet the stop rule, whose ticks do not depend on the timeout
    task = MIX_SHORT if attack == _STOPS_ITSELF_ON_THE_LAST_CALL else MIX
    verdicts = verify_code_batch(pool, [(task, attack), (MIX, MIX.reference), (MIX, MIX.reference)])
    assert (verdicts[0].outcome, verdicts[0].reward) == ("fail", 0.0), verdicts[0]
    assert [(v.outcome, v.error_class) for v in verdicts[1:]] == [("pass", None)] * 2, [v.evidence for v in verdicts]


# Three attacks on the reply a server sends. The server is the candidate's own process: the runner's
# functions there are frozen out of gc's sight, but the frame that calls the candidate is one step up
# the stack, and its globals hold the wire's ``encode`` and ``describe``. The candidate rebinds
# ``encode`` so that every answer is a well-formed set holding a list (unhashable where the runner
# decodes it); it answers with a set of 50,000 ints, ~0.8 MB of reply for the runner to decode and
# compare (from 200,000 on, the job sometimes ran out of memory first: its own fail too);
# it rebinds ``describe`` so that the ValueError it raises in is_even is reported as StopIteration,
# which, raised inside the test's map(), would end it early and pass ``all(map(...))`` and
# ``not any(map(...))`` alike.
_REWIRE = (
    "import sys\n"
    "def _rewire(name, fake):\n    f = sys._getframe(1)\n"
    "    while f is not None and name not in f.f_globals:\n        f = f.f_back\n"
    "    if f is None:\n        raise LookupError(name)\n    f.f_globals[name] = fake\n")
_UNHASHABLE_REPLY = fenced(
    _REWIRE + "def _fake(x, depth=0):\n    return ['set', [['list', []]]]\n"
    "def mix(x):\n    _rewire('encode', _fake)\n    return 0\n")
_HUGE_SET_REPLY = fenced("def mix(x):\n    return set(range(50_000))\n")
_FORGED_STOPITERATION = fenced(
    _REWIRE + "def _fake(exc):\n    return {'type': 'StopIteration', 'message': '', 'where': None}\n"
    "def is_even(n):\n    _rewire('describe', _fake)\n    raise ValueError(n)\n")


@pytest.mark.slow
@pytest.mark.parametrize(("task", "attack", "reached"),
                         [(MIX, _UNHASHABLE_REPLY, "exception:ProtocolError"), (MIX, _HUGE_SET_REPLY, "assertion"),
                          (EVEN, _FORGED_STOPITERATION, "exception:StopIteration")],
                         ids=["encoder rewritten to an unhashable set", "a 0.8 MB set reply",
                              "exception record rewritten to StopIteration"])
def test_a_forged_or_oversized_reply_never_pays_and_never_costs_the_next_answers(pool, task: Task, attack: str,
                                                                                  reached: str) -> None:
    """``reached``: the error class that shows the attack did what it meant to (the rebound function
    ran, the whole reply was decoded and compared), so a fail is the verifier's doing, not a no-op's."""
    from posttrain.envs.code import verify_code_batch

    verdicts = verify_code_batch(pool, [(task, attack), (task, task.reference), (MIX, MIX.reference)])
    assert (verdicts[0].outcome, verdicts[0].reward, verdicts[0].error_class) == ("fail", 0.0, reached), verdicts[0]
    assert [(v.outcome, v.error_class) for v in verdicts[1:]] == [("pass", None)] * 2, [v.evidence for v in verdicts]
