"""A response that crashes its verifier with a library's exception must not dress that crash as infra.

Before: ``verifier_bug`` read a crash line's exception type among the builtins only, so a verifier that
raised a library's programming error on one response -- ``json.decoder.JSONDecodeError``,
``tomllib.TOMLDecodeError``, ``binascii.Error``, ``decimal.InvalidOperation``, sympy's ``SympifyError``
(each a ValueError or ArithmeticError, named dotted by ``traceback``) -- identically on every try was
retried as infra until its tries ran out and the sample's whole group was dropped, unscored: the
failing response escaped its negative advantage (5 of 10 such crashes, ``/tmp/h3/count_crash.py``).
Now a library's exception of a programming kind stops like a builtin one, in one line naming the task
and the crash; a library's other kinds (a broken process pool, the sandbox's own errors) stay infra.

A verifier or environment that raises past ``except Exception``, or a plugin's verifier without
``guard``: before, of 5 cases 4 got through -- a ``SystemExit`` (argparse reading a response's
options, a ``sys.exit`` in an environment's step) ended a worker thread and the job's future never
settled (the run hung: 3 cases), and an unguarded verifier's ``KeyError`` was retried as
``infra:worker`` and its group dropped unscored. Now each stops in one line (the verifier's bug, or
the environment's ``StepError``), and every worker lives on."""

from __future__ import annotations

import argparse
import base64
import contextlib
import decimal
import io
import json
import sys
import threading
import tomllib
from concurrent.futures.process import BrokenProcessPool

import pytest

from posttrain.envs import get_domain, guard
from posttrain.policy import Generation, SamplingParams
from posttrain.rollout import Episode, run_batch
from posttrain.sandbox import PoolClosed
from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service, StepError, Verify
from posttrain.types import Observation, Task

TASK = Task(id="m", domain="math", prompt="1+1?", fields={"answer": "2"})
POLICY = SchedPolicy(max_tries=3, backoff_s=0.0, breaker_threshold=99)


def _raise(error: Exception) -> None:
    raise error


CRASHES = {
    "json": lambda r: json.loads(r),
    "toml": lambda r: tomllib.loads("=" + r),
    "base64": lambda r: base64.b64decode(r + "=", validate=True),
    "decimal": lambda r: decimal.Context(traps=[decimal.InvalidOperation]).create_decimal(r),
}


def _service(crash) -> Service:
    """The real math verifier behind a plugin-like wrapper that crashes on a response starting "bad"."""
    real = get_domain("math").make_verifier(None)

    def verify(task: Task, response: str):
        if response.startswith("bad"):
            crash(response)
        return real(task, response)

    return Service(LocalBackend({"math": DomainHooks(guard("math", verify))}), POLICY)


@pytest.mark.parametrize("kind", sorted(CRASHES))
def test_a_library_s_programming_error_on_every_try_stops_in_one_line(kind):
    with _service(CRASHES[kind]) as svc:
        with pytest.raises(StepError) as e:
            svc.verify_pairs([(TASK, "\\boxed{2}"), (TASK, "bad!")])
        stats = svc.stats()
    line = str(e.value)
    assert "\n" not in line and "task 'm': the math verifier crashed on each of 3 tries" in line, line
    assert (stats["groups_dropped"], stats["samples_dropped"]) == (0, 0)


@pytest.mark.parametrize("error", [BrokenProcessPool("a worker died"), PoolClosed("closed")],
                         ids=["broken-pool", "sandbox-closed"])
def test_a_library_s_infra_kind_stays_infra(error):
    with _service(lambda r: _raise(error)) as svc:
        right, bad = svc.verify_pairs([(TASK, "\\boxed{2}"), (TASK, "bad!")])
    assert right.passed and bad.error_class == "infra:exhausted"


# -- a verifier or an environment that raises past ``except Exception``, or without ``guard`` ---------


def _argparse(response: str) -> None:
    """A plugin verifier reading options from the response: argparse exits (SystemExit) on a bad one."""
    parser = argparse.ArgumentParser(prog="judge", exit_on_error=True, add_help=False)
    parser.add_argument("--n", type=int)
    with contextlib.redirect_stderr(io.StringIO()):
        parser.parse_args(response.split())


@pytest.mark.parametrize("wrap", [guard, lambda name, v: v], ids=["guarded", "unguarded"])
@pytest.mark.parametrize("crash", [_argparse, lambda r: _raise(KeyError("x"))], ids=["system-exit", "key-error"])
def test_a_verifier_that_exits_or_runs_unguarded_stops_in_one_line_and_never_hangs(wrap, crash):
    """Before: SystemExit (past ``guard`` and the service's ``except Exception``) ended a worker thread and
    the job's future never settled (the run hung); an unguarded verifier's KeyError was ``infra:worker``,
    retried, and the group dropped unscored."""
    real = get_domain("math").make_verifier(None)

    def verify(task: Task, response: str):
        if response.startswith("--"):
            crash(response)
        return real(task, response)

    with Service(LocalBackend({"math": DomainHooks(wrap("math", verify))}), POLICY) as svc:
        good, bad = svc.submit(Verify(TASK, "\\boxed{2}", "g", 0)), svc.submit(Verify(TASK, "--bogus", "g", 1))
        assert good.result(timeout=10).passed
        with pytest.raises(StepError) as e:
            bad.result(timeout=10)
        assert all(t.is_alive() for t in svc._threads)
    line = str(e.value)
    assert "\n" not in line and "the math verifier crashed on each of 3 tries" in line, line


class _Exits:
    """A stateful environment whose step exits the interpreter (a ``sys.exit`` in the env's own code)."""

    def reset(self, task):
        return Observation((1, 2))

    def step(self, action):
        sys.exit(3)

    def close(self):
        pass


class _Says:
    def generate(self, prompt_ids, params):
        return [Generation(tuple(p), (7,), (0.0,), "x", "eos") for p in prompt_ids]


def test_an_environment_step_that_exits_is_the_environment_s_error_never_a_hang():
    with Service(LocalBackend({"math": DomainHooks(get_domain("math").make_verifier(None))}), POLICY) as svc:
        runs = [Episode(TASK, _Exits(), "g", i, make_env=lambda _: _Exits()) for i in range(2)]
        done: dict[str, BaseException] = {}

        def drive() -> None:
            try:
                run_batch(_Says(), runs, SamplingParams(max_new_tokens=1), max_turns=1, service=svc)
            except BaseException as e:  # noqa: BLE001 - the test reads it
                done["error"] = e

        t = threading.Thread(target=drive, daemon=True)
        t.start()
        t.join(10)
        assert not t.is_alive(), "run_batch hung: a worker thread died on SystemExit"
    assert isinstance(done.get("error"), StepError) and "SystemExit: 3" in str(done["error"]), done
