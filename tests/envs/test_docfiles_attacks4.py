"""A helper's fourth adversarial read of the doc and files verifiers: ways to earn a signal without
the work it stands for, each a standing case (the verifier's own grader, real workspaces)."""

from __future__ import annotations

import random
import shlex

from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.files._agents import oracle, work
from posttrain.envs.files._env import build_task
from posttrain.envs.workspace import SUBMIT
from posttrain.types import Task

FILES = get_domain("files")


def _files_tasks() -> list[Task]:
    """Every kind of files work with inputs: a CSV, item files, a Latin-1 export, notes, a database."""
    return [build_task(random.Random(f"attacks4-{k}"), lv, f"files-attacks4-{k}", [k])
            for k, lv in (("sales", 1), ("inventory", 2), ("notes", 2), ("merge", 3), ("sqlite", 4))]


def test_naming_an_input_is_not_reading_it(pool) -> None:
    """process.inspected counted an input read when a shell command named it: ``ls -l`` (or ``echo``)
    of every input, then the right writes, earned 1.0 in 20 of 20 generated tasks, and so did a
    ``read_file`` past each input's end. Now an input is read when a result shows a passage of it:
    those score 0, while the oracle (read_file, or cat/dump in calls whose results show them) and
    an honest partial look (``head``) score 1."""
    verify = FILES.make_verifier(None)
    for task in _files_tasks():
        inputs = list(task.fields["inputs"])
        named = " ".join(map(shlex.quote, inputs))
        for attack in ([call("bash", command=f"ls -l -- {named}")], [call("bash", command=f"echo {named}")],
                       [call("read_file", path=p, start_line=10**6) for p in inputs]):
            got = play(pool, task, [*attack, *work(task), SUBMIT], verify).first
            assert got.outcome == "pass" and got.components["process.inspected"] == 0.0, (task.id, attack[0])
        right = play(pool, task, oracle(task), verify).first
        assert right.outcome == "pass" and right.components["process.inspected"] == 1.0, task.id
    task = _files_tasks()[0]
    head = call("bash", command="head -n 4 -- " + " ".join(map(shlex.quote, task.fields["inputs"])))
    got = play(pool, task, [head, *work(task), SUBMIT], verify).first
    assert got.components["process.inspected"] == 1.0
