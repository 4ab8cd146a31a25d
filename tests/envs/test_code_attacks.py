"""The code verifier under attack: the domain's exploit fixtures through the real sandbox.

The fixtures (``posttrain/envs/code/_hacks.py``, ``CodeEnv.exploit_fixtures()``) are responses
written the way a policy optimizing against the verifier would write them, grouped by the
classes of issue 14; each must score exactly 0 with outcome ``fail`` (never ``pass``, never
``infra_error``), within bounded time. docs/code-verifier-threat-model.md names each of them.
Below them: the runner's parts that the attacks rely on, tested in-process (no model code runs
in this process).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posttrain.envs import get_env
from posttrain.envs.code import _runner as runner
from posttrain.envs.code._hacks import EVEN, MIX, PLANT_INSIDE, PLANT_TOP, fenced
from posttrain.types import Task

HACKS = get_env("code").exploit_fixtures()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "task", "response"), HACKS, ids=[h[0] for h in HACKS])
def test_hack_scores_zero(code_verifier, name: str, task: Task, response: str) -> None:
    import time

    t0 = time.monotonic()
    v = code_verifier(task, response)
    assert (v.outcome, v.reward) == ("fail", 0.0), (name, v.outcome, v.error_class, v.feedback, v.evidence)
    assert time.monotonic() - t0 < 4 * task.limits.timeout_s + 10  # never a hang


@pytest.mark.slow
@pytest.mark.parametrize("task", [MIX, PLANT_INSIDE, PLANT_TOP, EVEN], ids=lambda t: t.id)
def test_references_of_the_attack_tasks_pass(code_verifier, task: Task) -> None:
    v = code_verifier(task, task.reference)
    assert v.passed, (v.error_class, v.feedback, v.evidence)
    # the second, shuffled run happened where the answers differ (one call: nothing to shuffle)
    assert v.evidence["replayed"] == {"mix": 4, "even": 7}.get(task.id, 0), v.evidence


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
