"""SWE-bench rows -> repo tasks, when each row's repository is present locally.

A row (a dict, as the SWE-bench datasets hold them: ``instance_id``, ``repo``, ``base_commit``,
``patch``, ``test_patch``, ``problem_statement``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``; the two id
lists as JSON strings or lists) becomes a task record whose snapshot is the local clone at
``base_commit`` (``repo.dir`` + ``repo.commit``: read with ``git archive``, so no history and no
``.git`` reach a sandbox), whose reference is the gold ``patch`` and whose withheld tests are the
row's ``test_patch``. Nothing is downloaded: the clone must already be in ``repos_dir`` as
``owner__name`` (SWE-bench's naming) or ``name``.

Only pytest node ids are graded (``path.py::name``); rows of repositories with other runners
(Django's ``test_x (module.Class)``, sympy's bare names) are refused in one line naming the row.

>>> row = {"instance_id": "o__p-1", "repo": "o/p", "base_commit": "abc", "patch": "", "test_patch": "",
...        "problem_statement": "x", "FAIL_TO_PASS": '["t.py::test_a"]', "PASS_TO_PASS": "[]"}
>>> swebench_record(row, repo_dir="/src/p")["repo"]
{'dir': '/src/p', 'commit': 'abc'}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from posttrain.errors import TaskError

ROW_KEYS = ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement", "FAIL_TO_PASS",
            "PASS_TO_PASS")


def _ids(row: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = row.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise TaskError(f"{where}: field {key!r}: expected a JSON list of test ids, got {value[:60]!r}") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskError(f"{where}: field {key!r}: expected a list of test ids, got {value!r}")
    bad = [v for v in value if "::" not in v or not v.split("::", 1)[0].endswith(".py")]
    if bad:
        raise TaskError(f"{where}: field {key!r}: {bad[0]!r} is not a pytest node id (path.py::name); only "
                        f"pytest-run repositories are graded")
    return value


def swebench_record(row: Mapping[str, Any], *, repo_dir: str | Path, timeout_sec: int = 300,
                    python_path: list[str] | None = None, test_command: str = "python -m pytest") -> dict[str, Any]:
    """The repo task record of one SWE-bench row whose clone is ``repo_dir`` (module docstring)."""
    where = f"SWE-bench row {row.get('instance_id', '?')!r}"
    missing = [k for k in ROW_KEYS if k not in row]
    if missing:
        raise TaskError(f"{where}: missing field(s) {missing}")
    record: dict[str, Any] = {
        "id": str(row["instance_id"]),
        "domain": "repo",
        "prompt": str(row["problem_statement"]),
        "repo": {"dir": str(repo_dir), "commit": str(row["base_commit"])},
        "environment": {"language": "python", "test_command": test_command, "timeout_sec": timeout_sec},
        "fail_to_pass": _ids(row, "FAIL_TO_PASS", where),
        "pass_to_pass": _ids(row, "PASS_TO_PASS", where),
        "tags": ["swe-bench", str(row["repo"])],
        "metadata": {"swe_bench_repo": str(row["repo"]), "base_commit": str(row["base_commit"])},
    }
    if python_path:
        record["environment"]["python_path"] = list(python_path)
    if str(row["test_patch"]).strip():
        record["test_patch"] = str(row["test_patch"])
    if str(row["patch"]).strip():
        record["reference"] = "```diff\n" + str(row["patch"]) + "```\n"
    return record


def find_clone(repos_dir: str | Path, repo: str) -> Path | None:
    """The local clone of ``owner/name`` under ``repos_dir`` (``owner__name`` or ``name``), or None."""
    owner, _, name = repo.partition("/")
    for candidate in (Path(repos_dir) / f"{owner}__{name}", Path(repos_dir) / name):
        if (candidate / ".git").exists():
            return candidate.resolve()
    return None


def swebench_records(rows: Iterable[Mapping[str, Any]], repos_dir: str | Path, **kwargs: Any) -> list[dict[str, Any]]:
    """Records for every row whose repository is cloned under ``repos_dir``; a row without a clone is
    a ``TaskError`` naming the row and where its clone was looked for."""
    out = []
    for row in rows:
        clone = find_clone(repos_dir, str(row.get("repo", "")))
        if clone is None:
            raise TaskError(f"SWE-bench row {row.get('instance_id', '?')!r}: no clone of {row.get('repo')!r} in "
                            f"{repos_dir} (expected {str(row.get('repo', '')).replace('/', '__')} or its name); "
                            f"the loader never downloads")
        out.append(swebench_record(row, repo_dir=clone, **kwargs))
    return out
