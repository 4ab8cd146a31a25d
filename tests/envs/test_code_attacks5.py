"""A fifth read of the code domain as a reward-hacking policy: tricks that found no hole, pinned.

Each candidate below is generic over the generated tasks (``CodeEnv.generate_tasks``): it finds the
entry point's own docstring examples (the visible test) in the prompt's function, and does its trick
on every other call (the hidden tests). Over 8 generated tasks (seed 5) each scored 0 of 8 on the
real sandbox, every verdict a ``fail`` (never ``infra_error``): lying subclasses of int, str, list and
an always-equal object (``exception:TypeError``: only exact built-ins cross), NaN, patched builtins,
8 MiB of stdout and stderr per call (``assertion``), the examples answered then a hang, and on the
hidden calls only: SIGKILL to every process, to the parent, a memory bomb, /tmp, /dev/shm and the
working directory filled, a fork bomb, a daemon left behind, every fd closed, forged replies on every
fd (``hidden_tests``: the visible verdict stands and the hidden one is the candidate's own fail).
Pinned here on 4 of those tasks (the 4 tricks that spend a limit on 2) at a 1 s timeout.
"""

from __future__ import annotations

import dataclasses

import pytest

from posttrain.envs.code import ENV
from posttrain.envs.code._env import verify_code_batch
from posttrain.types import TaskLimits

_EXAMPLES = r'''
import ast as _ast, re as _re
_T = {}
for _m in _re.finditer(r">>> \w+\((.*)\)\n\s*(.*)\n", ENTRY.__doc__ or ""):
    _T[_m.group(1)] = _ast.literal_eval(_m.group(2))
def _key(a):
    return ', '.join(map(repr, a))
'''


def _examples_then(body: str) -> str:
    """The docstring's examples answered from a table; ``body`` on every other call."""
    lines = "".join(f"    {line}\n" for line in body.splitlines())
    return _EXAMPLES + f"def ENTRY(*a):\n    if _key(a) in _T:\n        return _T[_key(a)]\n{lines}    return None\n"


_LIAR = ("class E({base}):\n    def __eq__(s, o):\n        return True\n    def __ne__(s, o):\n        return False\n"
         "    __hash__ = object.__hash__\n    def __len__(s):\n        return 0\n    def __iter__(s):\n"
         "        return iter(())\n    def __bool__(s):\n        return True\n")

TRICKS = {
    "lying int subclass": _LIAR.format(base="int") + "def ENTRY(*a):\n    return E(0)\n",
    "lying str subclass": _LIAR.format(base="str") + "def ENTRY(*a):\n    return E('')\n",
    "lying list subclass": _LIAR.format(base="list") + "def ENTRY(*a):\n    return E()\n",
    "always-equal object": _LIAR.format(base="object") + "def ENTRY(*a):\n    return E()\n",
    "nan": "def ENTRY(*a):\n    return float('nan')\n",
    "builtins patched": "import builtins\nbuiltins.AssertionError = type('X', (BaseException,), {})\n"
                        "builtins.all = lambda *a: True\ndef ENTRY(*a):\n    return None\n",
    "flood stdout and stderr": "import os\ndef ENTRY(*a):\n    os.write(1, b'x' * (8 << 20))\n"
                               "    os.write(2, b'y' * (8 << 20))\n    return None\n",
    "examples, then hang": _examples_then("import time\ntime.sleep(1000)"),
    "hidden: SIGKILL to every process": _examples_then("import os, signal\nos.kill(-1, signal.SIGKILL)"),
    "hidden: kill the parent": _examples_then("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"),
    "hidden: memory bomb": _examples_then("x = []\nwhile True:\n    x.append(bytearray(1 << 24))"),
    "hidden: fill the writable places": _examples_then(
        "for d in ('/tmp', '/dev/shm', '.'):\n    try:\n        f = open(d + '/big', 'wb')\n        while True:\n"
        "            f.write(b'0' * (1 << 24))\n    except OSError:\n        pass"),
    "hidden: fork bomb": _examples_then("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                                        "        pass"),
    "hidden: daemon left behind": _examples_then(
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(120)\n"
        "    os._exit(0)\nreturn next(iter(_T.values()))"),
    "hidden: every fd closed": _examples_then("import os\nos.closerange(0, 1024)"),
    "hidden: forged replies on every fd": _examples_then(
        "import os\nfor fd in range(1, 64):\n    try:\n        os.set_blocking(fd, False)\n"
        "        os.write(fd, b'{\"ok\": [\"int\", \"0\"]}\\n' * 1000)\n    except OSError:\n        pass"),
}


def _tasks(n: int = 4, timeout_s: float = 2.0):
    # a short timeout: the hangs and bombs end at it (the generated tasks' 10 s is the default)
    return [dataclasses.replace(t, limits=TaskLimits(timeout_s=timeout_s, memory_mb=256))
            for t in ENV.generate_tasks(n, seed=5)]


def _fenced(task, src: str) -> str:
    return "```python\n" + src.replace("ENTRY", task.fields["entry_point"]) + "\n```\n"


# The tricks that spend a limit (time, memory, pids, disk) on each hidden call, whatever the task: they
# cost seconds per task, and 2 tasks (4 items in one job: a bomb, then the next task's two items) show
# both that the trick fails and that it costs the items after it nothing; the others run on all 4.
_SPEND_A_LIMIT = {"examples, then hang", "hidden: memory bomb", "hidden: fill the writable places", "hidden: fork bomb"}


@pytest.mark.parametrize("name", list(TRICKS))
def test_trick_fails_every_generated_task_as_its_own_fail(pool, name: str) -> None:
    """At a 1 s timeout (0.7 s per call): the hang, the fork bomb and the fills run out of it, each a
    ``fail`` all the same, 2.5x sooner than at 2 s; the examples table passes at 2 s in the test below."""
    tasks = _tasks(2 if name in _SPEND_A_LIMIT else 4, timeout_s=1.0)
    verdicts = verify_code_batch(pool, [(t, _fenced(t, TRICKS[name])) for t in tasks])
    assert [v.outcome for v in verdicts] == ["fail"] * len(tasks), [(v.outcome, v.error_class, v.reason) for v in verdicts]


def test_the_examples_table_passes_the_visible_test_and_the_references_pass(pool) -> None:
    """The tricks' visible half is right (so their hidden half is what they are judged on), and the
    references of the same tasks pass."""
    tasks = _tasks()
    verdicts = verify_code_batch(pool, [(t, t.reference) for t in tasks])
    assert all(v.passed for v in verdicts), [(v.error_class, v.reason) for v in verdicts]
    table = verify_code_batch(pool, [(t, _fenced(t, _examples_then("return None"))) for t in tasks])
    assert [v.error_class for v in table] == ["hidden_tests"] * len(tasks)
