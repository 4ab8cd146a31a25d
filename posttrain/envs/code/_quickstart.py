"""The quickstart's code family (``quickstart-code``) and the scripted demonstrator's mistake on it.

Small Python functions ``def add_17(x): return x + 17``: the skill is reading the operator and the
constant out of the prompt, checked by the real code verifier (HumanEval-style
``check(candidate)`` tests in the sandbox). The demonstrator's mistake is the wrong operator.
"""

from __future__ import annotations

import random

from posttrain.types import Task, TaskLimits

NAME = "code"
FAMILY = "quickstart-code"

_OPS = {
    # name: (docstring verb, python operator, the operator a confused demonstrator writes)
    "add": ("plus", "+", "-"),
    "sub": ("minus", "-", "+"),
    "mul": ("times", "*", "+"),
}
_VARS = ("x", "n", "v", "a")


def quickstart_tasks(*, seed: int = 0) -> list[Task]:
    """All code tasks of the quickstart family (3 ops x 4 argument names x 98 constants), shuffled."""
    rng = random.Random(seed)
    tasks = []
    for op, (verb, sym, _) in _OPS.items():
        for var in _VARS:
            for k in range(2, 100):
                name = f"{op}_{k}"
                prompt = f'def {name}({var}):\n    """Return {var} {verb} {k}."""\n'
                asserts = "\n".join(f"    assert candidate({x}) == {eval_op(x, sym, k)}" for x in (3, 10, 41))
                tasks.append(
                    Task(
                        id=f"qs-code-{name}-{var}",
                        domain=NAME,
                        prompt=prompt,
                        fields={"entry_point": name, "test": f"def check(candidate):\n{asserts}\n"},
                        reference=f"    return {var} {sym} {k}\n",
                        tags=("python", op),
                        limits=TaskLimits(timeout_s=5.0, memory_mb=256),
                    )
                )
    rng.shuffle(tasks)
    return tasks


def eval_op(x: int, sym: str, k: int) -> int:
    """The ground truth of a code task, computed without eval."""
    return {"+": x + k, "-": x - k, "*": x * k}[sym]


def demonstration_mistake(task: Task) -> str | None:
    """The demonstrator's wrong operator on a quickstart-family task, else None."""
    op = str(task.fields.get("entry_point", "")).split("_")[0]
    if op not in _OPS or task.reference is None:
        return None
    _, sym, wrong = _OPS[op]
    return task.reference.replace(f" {sym} ", f" {wrong} ", 1)
