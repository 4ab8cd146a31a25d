"""A completion attacking a user's reward function through what the function echoes, and a user's
function broken in ways a run must name as the user's own (posttrain.envs.function).

- A lone surrogate (``\\ud800``, which JSON's escape decodes to) in the completion, echoed by the
  function into an exception's message or a verdict's feedback: the verdict held it raw, and the
  run's UTF-8 records could not be written (``evaluate/records.py``: the eval crashed on one
  completion). Measured before the fix over 40 generated tasks with two echoing functions: 80 of 80
  verdicts unwritable; after: 0 of 80, each still a fail.
- The user's own bugs, named as such: numpy's ``np.bool_`` was refused as "returned bool, not a
  number" (numpy names its type ``bool``), every completion a fail under a line that contradicts
  the docs (a bool is taken); it is read as the bool it is. ``None`` (TRL's "does not apply") is
  named with what it means in TRL. A function that breaks on a task's own reference (TRL's
  conversational ``c[0]["content"]`` on a text completion) was warned at load only as "a task's
  reference does not get full marks"; the warning now says it is a configuration error and why.
- A completion run by the user's function (a code reward) that forks and exits: its child,
  reparented away from the check worker, kept running after the check passed, beside every later
  check, its CPU charged to none (up to the worker's 300 s ``RLIMIT_CPU`` backstop). Before: 1 of 1
  such children alive after its check; after: 0 of 1 (killed before the reply). A helper process the
  function starts and keeps is below the worker, and stays.
- A function that raises ValueError on the completions it cannot read (their doing) and KeyError on
  others (the user's bug): stderr said only the first ("once per function and reason", the reason
  being "raised"), so the bug was never told beyond each verdict's feedback; each exception class
  is now told once. Before: 1 of the 2 lines; after: 2 of 2.
- A task whose ``data`` the function cannot be called with (``exact_match`` without ``answer``; a
  key that a function without ``**data`` does not take) parsed, and every completion, the reference
  included, failed as ``raised:TypeError``: the model charged for the record's error. It is now a
  ``TaskError`` at load naming the field, the function and the key (before: 2 of 2 parsed; after:
  0 of 2)."""

from __future__ import annotations

import json
import os

import pytest

from posttrain.envs import get_domain
from posttrain.envs.function import noop_problems
from posttrain.errors import TaskError

DOMAIN = get_domain("function")
VERIFY = DOMAIN.make_verifier(None)

USER_MODULE = '''
import subprocess
import sys

from posttrain.types import Verdict

_helper = None

def echo(prompt, completion, answer, mode):
    ok = completion.strip() == answer
    if mode == "raise" and completion == "key":
        return {"7": 1.0}[completion]  # the user's bug, on some completions only
    if mode == "raise" and not ok:
        raise ValueError(f"cannot read {completion}")
    if mode == "verdict":
        return Verdict("pass" if ok else "fail", 1.0 if ok else 0.0, feedback=f"you said {completion}")
    if mode == "numpy":
        import numpy as np
        return np.bool_(ok)
    if mode == "none":
        return None
    if mode == "exec":  # runs the completion, as a code reward does
        run = subprocess.run([sys.executable, "-c", completion], stdout=subprocess.DEVNULL, timeout=10)
        return 1.0 if run.returncode == 0 else 0.0
    if mode == "helper":  # a helper process started on the first call and kept
        global _helper
        _helper = _helper or subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])
        return 1.0 if _helper.poll() is None else 0.0
    if mode == "chat":  # TRL's conversational form: completions are lists of messages there
        return 1.0 if completion[0]["content"] == answer else 0.0
    return 1.0 if ok else 0.0
'''


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    """``reward_attack3:echo``, a module of the user's in the directory the checks run from."""
    where = tmp_path_factory.mktemp("user")
    (where / "reward_attack3.py").write_text(USER_MODULE)
    old = os.getcwd()
    os.chdir(where)
    yield "reward_attack3:echo"
    os.chdir(old)


def _task(reward: str, mode: str, tid: str = "t"):
    return DOMAIN.parse_task({"id": tid, "prompt": "What is 3 + 4?", "reward": reward,
                              "data": {"answer": "7", "mode": mode}, "reference": "7"}, "test")


@pytest.mark.parametrize("mode", ["raise", "verdict"])
def test_a_lone_surrogate_the_function_echoes_fails_in_a_verdict_records_can_hold(echo, mode: str) -> None:
    task = _task(echo, mode)
    assert VERIFY(task, "7").passed
    verdict = VERIFY(task, "8\ud800")
    json.dumps(verdict.to_json(), ensure_ascii=False).encode()  # the run's records are UTF-8
    assert verdict.outcome == "fail" and verdict.reward == 0.0
    assert "\\ud800" in verdict.feedback  # escaped, still shown


def test_numpy_bools_are_read_and_none_is_named_as_trls(echo) -> None:
    task = _task(echo, "numpy")
    assert VERIFY(task, "7").passed and VERIFY(task, "8").outcome == "fail"
    verdict = VERIFY(_task(echo, "none"), "7")
    assert verdict.error_class == "reward_function:type" and "returned None (TRL's" in verdict.feedback


def test_a_function_broken_on_the_reference_is_named_a_configuration_error(echo) -> None:
    task = _task(echo, "chat", tid="chat-1")
    verdict = VERIFY(task, "7")
    assert verdict.error_class == "reward_function:raised:TypeError" and "not chat messages" in verdict.feedback
    [line] = [x for x in noop_problems([task]) if "reference" in x]
    assert "breaks on the reference of task chat-1, a configuration error" in line and "TypeError" in line


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_a_process_the_completion_leaves_running_is_killed_with_its_check(echo, tmp_path) -> None:
    pid_file = tmp_path / "child.pid"
    completion = ("import os, time\npid = os.fork()\nif pid == 0:\n    time.sleep(30)\n"
                  f"else:\n    open({str(pid_file)!r}, 'w').write(str(pid))\n")
    assert VERIFY(_task(echo, "exec"), completion).passed
    assert _state(int(pid_file.read_text())) in ("gone", "Z")
    helper = _task(echo, "helper")
    assert VERIFY(helper, "x").passed and VERIFY(helper, "x").passed  # its own child: kept between checks


def test_each_exception_class_of_a_function_is_told_once(echo, capsys, monkeypatch) -> None:
    from posttrain.envs.function import _domain

    monkeypatch.setattr(_domain, "_told", set())
    task = _task(echo, "raise", tid="told")
    assert [VERIFY(task, c).error_class for c in ("8", "key", "9")] == [
        "reward_function:raised:ValueError", "reward_function:raised:KeyError", "reward_function:raised:ValueError"]
    err = [line for line in capsys.readouterr().err.splitlines() if "reward_attack3:echo raised" in line]
    assert len(err) == 2 and "ValueError" in err[0] and "KeyError" in err[1]


@pytest.mark.parametrize(("data", "says"), [
    ({"mode": "plain"}, "(it requires answer)"),
    ({"answer": "7", "mode": "plain", "level": 3}, "has no **data, not level"),
])
def test_data_the_function_cannot_take_is_the_records_error(echo, data, says) -> None:
    with pytest.raises(TaskError, match="field 'data'") as e:
        DOMAIN.parse_task({"id": "d", "prompt": "p", "reward": echo, "data": data}, "test")
    assert says in str(e.value) and "reward_attack3:echo" in str(e.value)
