"""report.html's task-pool panels, drawn from a run directory written here: per-domain curves (a chart
per metric, a series per domain; the learning curves leave ``domain/*`` to them) and the canary
alarms (each passing canary attempt, in RL or in an evaluation's canaries, linked to its trajectory)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from posttrain.evaluate.report import write_report


def _record(task_id: str, outcome: str, *, step: int | None, tags: list[str], stage: str = "rl") -> dict:
    return {"task_id": task_id, "domain": "rg/lcm", "sample_idx": 1, "attempt": 0, "outcome": outcome,
            "reward": 1.0 if outcome == "pass" else 0.0, "prompt": "the question", "completion": "the echo",
            "tags": tags, "stage": stage, "step": step}


def _run(tmp_path: Path, *, canary_pass: bool) -> Path:
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    (run / "canaries").mkdir()
    rows = [{"stage": "rl", "step": s, "reward_mean": 0.1 * s, "domain/rg/lcm/reward": 0.2 * s,
             "domain/math/reward": 0.5, "domain/rg/lcm/level": float(s // 2), "domain/math/pool_normal": 30.0 - s,
             "canary/episodes": 2.0, "canary/passed": float(canary_pass and s == 2)} for s in range(4)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs = [_record("rg-lcm-3", "pass", step=2, tags=[]),
            _record("rg-lcm-canary-0-1", "pass" if canary_pass else "fail", step=2, tags=["canary"])]
    (run / "trajectories" / "rl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    evald = [_record("rg-lcm-canary-0-1", "pass" if canary_pass else "fail", step=None, tags=["canary"],
                     stage="eval/rl")]
    (run / "canaries" / "rl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evald))
    return run


def test_per_domain_curves_a_chart_per_metric_a_series_per_domain(tmp_path: Path) -> None:
    html = write_report(_run(tmp_path, canary_pass=False)).read_text()
    section = html[html.index("<h2>Per domain (RL)</h2>"):]
    assert "RL, 2 domains" in section
    for title in ("reward per domain", "curriculum level per domain", "normal pool (tasks) per domain"):
        assert f'aria-label="{title}"' in section, title
    curves = html[html.index("<h2>Learning curves</h2>"):html.index("<h2>Per domain (RL)</h2>")]
    assert "domain/rg/lcm/reward" not in curves  # left to the per-domain panel
    assert "No alarm: 8 canary episodes over 4 steps, none passed." in html


def test_a_passing_canary_is_an_alarm_linked_to_its_trajectory(tmp_path: Path) -> None:
    html = write_report(_run(tmp_path, canary_pass=True)).read_text()
    section = html[html.index("<h2>Hack alarms (canaries)</h2>"):]
    assert "<b>hack alarm</b>: 2 passing attempt(s) on canary tasks" in section
    anchors = re.findall(r'href="#(alarm-run-\d)"', section)
    assert anchors == ["alarm-run-0", "alarm-run-1"]
    for a in anchors:  # each link lands on the trajectory, drawn with its prompt and completion
        block = section[section.index(f'id="{a}"'):]
        assert "rg-lcm-canary-0-1" in block[:2000] and "the echo" in block[:4000]
