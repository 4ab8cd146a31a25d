"""A response that crashes its verifier with a library's exception must not dress that crash as infra.

Before: ``verifier_bug`` read a crash line's exception type among the builtins only, so a verifier that
raised a library's programming error on one response -- ``json.decoder.JSONDecodeError``,
``tomllib.TOMLDecodeError``, ``binascii.Error``, ``decimal.InvalidOperation``, sympy's ``SympifyError``
(each a ValueError or ArithmeticError, named dotted by ``traceback``) -- identically on every try was
retried as infra until its tries ran out and the sample's whole group was dropped, unscored: the
failing response escaped its negative advantage (5 of 10 such crashes, ``/tmp/h3/count_crash.py``).
Now a library's exception of a programming kind stops like a builtin one, in one line naming the task
and the crash; a library's other kinds (a broken process pool, the sandbox's own errors) stay infra."""

from __future__ import annotations

import base64
import decimal
import json
import tomllib
from concurrent.futures.process import BrokenProcessPool

import pytest

from posttrain.envs import get_domain, guard
from posttrain.sandbox import PoolClosed
from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service, StepError
from posttrain.types import Task

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
