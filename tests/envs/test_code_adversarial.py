"""The code verifier against what a candidate's *reply* makes the runner and the host do, through
the real sandbox.

The test runs in the runner, on plain values rebuilt from the reply: its own work on them (a
message that ``str()``s a wrong answer, as HumanEval/77, 78 and 97 do) is no candidate's deadline.
A huge integer made that one C call run for hours (``str()`` is quadratic), holding the sandbox job
to the batch's whole budget, its neighbours' shares included.
"""

from __future__ import annotations

import time

import pytest

from posttrain.envs.code._hacks import MIX, _task, fenced

# HumanEval/97's form: the assertion's message formats the answer, evaluated when it is wrong.
STR_MESSAGE = _task(
    "str-message", 'def f(x: int) -> int:\n    """Return x + 1."""\n', "f",
    'def check(candidate):\n    assert candidate(3) == 4, "First test error: " + str(candidate(3))\n'
    "    assert candidate(5) == 6\n",
    "    return x + 1\n", timeout_s=1.0)
HUGE_INT = fenced("def f(x):\n    return 1 << 50_000_000\n")  # 12.5 MB of hex: instant to make, hours to str()


@pytest.mark.slow
def test_a_reply_the_test_works_on_for_hours_holds_its_batch_only_for_its_own_share(pool) -> None:
    """A huge integer that the test's message ``str()``s (limit 0 on digits: the runner's): the old
    runner sat in that one C call until the job's timeout, the sum of the batch's shares (here
    2.5 x (1 + 3 x 4) s + 2 s: ~35 s), then every item was re-run alone. Now each item in a batch has
    a kernel alarm at its own share (``_env._item_budget``): the runner ends there, the item fails
    alone (its own timeout) and the correct answers after it pass, re-run alone."""
    from posttrain.envs.code import verify_code_batch

    share = 2.5 * STR_MESSAGE.limits.timeout_s + 0.5  # _env._item_budget
    t0 = time.monotonic()
    verdicts = verify_code_batch(pool, [(STR_MESSAGE, HUGE_INT)] + [(MIX, MIX.reference)] * 3)
    took = time.monotonic() - t0
    assert (verdicts[0].outcome, verdicts[0].reward, verdicts[0].error_class) == ("fail", 0.0, "timeout"), verdicts[0]
    assert [(v.outcome, v.error_class) for v in verdicts[1:]] == [("pass", None)] * 3, [v.evidence for v in verdicts]
    # its share in the batch, then alone (~6.6 s here); the old runner first waited out the job's whole
    # timeout (the sum of the shares, ~35 s): a bound between the two, loose for a loaded host
    assert took < 30, (took, share)


@pytest.mark.slow
def test_a_lone_surrogate_in_a_message_or_an_answer_reaches_the_verdict_as_text(pool) -> None:
    """JSON's ``\\ud800`` decodes to a lone surrogate, which no UTF-8 text holds: raised as an
    exception's message, or answered where the test's assertion message formats the answer, it was
    in the verdict's feedback and evidence, and writing eval records (``ensure_ascii=False``) or
    tokenizing the repair prompt raised. Now its escape, as text."""
    import json

    from posttrain.envs.code import verify_code_batch

    raises = fenced("def mix(x):\n    raise ValueError('\\ud800')\n")
    answers = fenced("def f(x):\n    return '\\ud800'\n")
    verdicts = verify_code_batch(pool, [(MIX, raises), (STR_MESSAGE, answers), (MIX, MIX.reference)])
    assert [(v.outcome, v.error_class) for v in verdicts] == [
        ("fail", "exception:ValueError"), ("fail", "assertion"), ("pass", None)], [v.evidence for v in verdicts]
    for v in verdicts[:2]:
        assert "\\ud800" in v.feedback, v.feedback
        v.feedback.encode("utf-8")
        json.dumps(v.evidence, ensure_ascii=False).encode("utf-8")
