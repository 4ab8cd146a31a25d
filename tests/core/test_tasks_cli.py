"""``posttrain tasks list|stats|validate --all-domains`` and validate on columnar files, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from posttrain.cli import main


def test_tasks_list_names_every_domain(capsys) -> None:
    assert main(["tasks", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["domain", "levels"]
    assert any(line.split()[:2] == ["rg/countdown", "0-4"] for line in out)
    assert out[-1].endswith("with canaries") and int(out[-1].split()[0]) == len(out) - 2


def test_tasks_stats_of_a_run(tmp_path: Path, capsys) -> None:
    (tmp_path / "trajectories").mkdir()
    records = [{"task_id": "t", "domain": "math", "sample_idx": j, "attempt": 0, "step": 0,
                "outcome": "pass" if j else "fail", "tags": []} for j in range(4)]
    (tmp_path / "trajectories" / "rl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["tasks", "stats", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "math" in out and "0.750" in out
    assert main(["tasks", "stats", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_validate_all_domains_runs_the_conformance_suite(capsys) -> None:
    assert main(["tasks", "validate", "--all-domains", "--only", "rg/spell"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 domains, 0 with problems"
    assert main(["tasks", "validate", "--all-domains", "--only", "zz"]) == 2
    assert main(["tasks", "validate", "--all-domains", "--only", "rg/spell", "x.jsonl"]) == 2
    assert "not both" in capsys.readouterr().err


def test_validate_reads_parquet(tmp_path: Path, capsys) -> None:
    rows = [{"id": f"m{i}", "domain": "math", "prompt": f"{i}+{i}?", "answer": str(2 * i),
             "reference": f"\\boxed{{{2 * i}}}"} for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "m.parquet")
    assert main(["tasks", "validate", "--no-run", str(tmp_path / "m.parquet")]) == 0
    assert capsys.readouterr().out.strip() == f"{tmp_path / 'm.parquet'}: 3 tasks, schema ok"
    assert main(["tasks", "validate", "--no-run", "--split", "train", str(tmp_path / "m.parquet")]) == 2
    assert "a single file has no splits" in capsys.readouterr().err
