"""``posttrain tasks validate`` on a domain's example file, as a user runs it: shared by
tests/envs/test_{doc,files}.py (each domain names the field it corrupts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def check_tasks_validate(tmp_path: Path, domain: str, field: str, bad_value: Any) -> None:
    """The first 3 examples validate (references pass, no-ops fail); the first with ``field`` set to
    ``bad_value`` is refused in one line naming the field, exit 2."""
    lines = (ROOT / "examples" / "tasks" / f"{domain}.jsonl").read_text().splitlines()
    (tmp_path / f"{domain}.jsonl").write_text("\n".join(lines[:3]) + "\n")

    def run(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "posttrain.cli", "tasks", "validate", str(path)],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)

    good = run(tmp_path / f"{domain}.jsonl")
    assert good.returncode == 0 and "3 tasks, 0 problem(s)" in good.stdout, good.stdout + good.stderr
    (tmp_path / "bad.jsonl").write_text(json.dumps({**json.loads(lines[0]), field: bad_value}) + "\n")
    bad = run(tmp_path / "bad.jsonl")
    assert bad.returncode == 2 and f"'{field}'" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
