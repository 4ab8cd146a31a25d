"""``posttrain audit RUN_DIR --sample N``: re-verify a random sample of passes; a page for a person.

Rewards drift: a verifier gets a fix, a hack guard learns a new exploit, a sandbox changes. The
audit draws ``N`` records that *passed* (from ``RUN/trajectories/*.jsonl`` and
``RUN/eval/*.jsonl``, seeded, file by file in turn: ``_draw``), looks their tasks up (``RUN/tasks/*.jsonl``, plus
``--tasks`` files and ``--suite``), verifies the stored completion again with the current
verifier of the task's domain and its hack guards (whatever ``env.make_verifier`` applies now,
reporting the flags in the verdict's evidence), all as one batch of the execution service
(``posttrain.sched``), and writes:

- ``RUN/audit/audit.jsonl``: one line per sampled record: the stored verdict, the new one,
  and ``agree`` (true/false/null when the re-verification hit an infra error);
- the count of passed records of canary tasks (tag ``canary``), each a hack alarm, on the page and
  in ``AuditResult.canary_passes``;
- ``RUN/audit/review.html``: a self-contained page listing every sampled item (disagreements
  first) with prompt, completion, both verdicts and feedback, a "looks right / looks wrong"
  choice and a notes box per item, and a button that downloads the person's review as JSON
  (sampled human review of outputs).

What it does not do: change any record, or judge what the person decides.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from posttrain.errors import UserError, refuse_directory
from posttrain.evaluate._page import CSS
from posttrain.evaluate._svg import as_text
from posttrain.evaluate.records import EvalRecord, read_records, record_from_verdict, verifier_version
from posttrain.evaluate.runner import load_suite
from posttrain.rollout.episodes import is_episode_record
from posttrain.sched import Service
from posttrain.types import Task

OpenService = Callable[[Iterable[str]], AbstractContextManager[Service]]
"""``open_service(domains)``: a context manager giving a service for those domains (the wiring's
``posttrain.cli.open_service``)."""

__all__ = ["AuditResult", "run_audit"]


@dataclass(frozen=True)
class AuditResult:
    """Counts of one audit, and where its files went."""

    population: int
    """Passed records available to sample from."""
    checked: int
    """Sampled records sent to the current verifier (infra errors included; agent episodes and records
    of tasks not found are not)."""
    disagreements: int
    unverified: int
    """Re-verifications that hit an infra error (neither agree nor disagree)."""
    missing_tasks: int
    canary_passes: int
    """Passed records of canary tasks (tag ``canary``: no honest response passes one), all of them,
    sampled or not: each is a hack alarm (``posttrain.tasks.canary_alarms``)."""
    review_page: Path
    records_path: Path
    episodes_not_reverified: int = 0
    """Sampled agent episodes, not re-verified from their last answer (neither agree nor disagree, nor
    an infra error)."""

    @property
    def reverified(self) -> int:
        """Sampled records the current verifier gave a verdict on (agree or disagree): 0 means the audit
        checked nothing (every task not found, every re-verification an infra error, or only agent
        episodes), whatever its disagreement count says."""
        return self.checked - self.unverified


def _load_tasks(run: Path, task_files: list[str], suite: str | None) -> dict[str, Task]:
    files = sorted((run / "tasks").glob("*.json*")) + [Path(f) for f in task_files]
    tasks: dict[str, Task] = {}
    if files:
        from posttrain.tasks import load_tasks

        for f in files:
            refuse_directory(f, "a task file (--tasks)")
            if not f.is_file():
                raise UserError(f"--tasks: {f} not found")
            tasks.update({t.id: t for t in load_tasks(f)})
    if suite:
        tasks.update({t.id: t for t in load_suite(suite)})
    return tasks


def _passed_records(run: Path) -> list[tuple[str, EvalRecord]]:
    out = []
    for folder in ("trajectories", "eval", "canaries"):
        for path in sorted((run / folder).glob("*.jsonl")):
            out += [(f"{folder}/{path.name}", r) for r in read_records(path) if r.passed]
    return out


def _draw(population: list[tuple[str, EvalRecord]], n: int, seed: int) -> list[tuple[str, EvalRecord]]:
    """``n`` passed records (all, if fewer), drawn from each file in turn, each file's in a seeded random
    order: an evaluation's few passes get as many draws as a training log's many. Drawn uniformly over
    all records, 2,000 RL passes beside 20 evaluation passes left the evaluation files 1 draw in 100:
    a flipped verdict among the 20 (the figures reported) was found by 0 of 20 seeds at ``--sample 50``;
    by all 20 this way."""
    rng = random.Random(seed)
    files: dict[str, list[tuple[str, EvalRecord]]] = {}
    for item in population:
        files.setdefault(item[0], []).append(item)
    queues = [rng.sample(items, len(items)) for _, items in sorted(files.items())]
    picked: list[tuple[str, EvalRecord]] = []
    while len(picked) < min(n, len(population)):
        for queue in queues:
            if queue and len(picked) < n:
                picked.append(queue.pop())
    return picked


def run_audit(
    run_dir: str | Path,
    *,
    sample: int,
    seed: int = 0,
    task_files: list[str] | None = None,
    suite: str | None = None,
    open_service: OpenService,
) -> AuditResult:
    """Re-verify ``sample`` random passed records of a run through a service for their tasks'
    domains (``open_service``, opened and closed here); write audit.jsonl and review.html."""
    run = Path(run_dir)
    if not run.is_dir():
        raise UserError(f"{run}: run directory not found")
    if sample < 1:
        raise UserError(f"--sample must be >= 1, got {sample}")
    population = _passed_records(run)
    if not population:
        raise UserError(f"{run}: no passed records in trajectories/*.jsonl or eval/*.jsonl to audit")
    tasks = _load_tasks(run, task_files or [], suite)
    picked = _draw(population, sample, seed)
    with open_service(t.domain for t in tasks.values() if t.id in {r.task_id for _, r in picked}) as service:
        items = _reverify(picked, tasks, service)
    out_dir = run / "audit"
    out_dir.mkdir(exist_ok=True)
    records_path = out_dir / "audit.jsonl"
    with records_path.open("w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(item, ensure_ascii=False) + "\n")
    page = out_dir / "review.html"
    canaries = sum("canary" in r.tags for _, r in population)
    page.write_text(_review_html(run, items, len(population), canaries), encoding="utf-8")
    return AuditResult(
        population=len(population),
        checked=sum(_status(i) not in ("missing task", _EPISODE) for i in items),
        disagreements=sum(i["agree"] is False for i in items),
        unverified=sum(_status(i) == "infra error on re-verify" for i in items),
        missing_tasks=sum(i["now"] is None for i in items),
        canary_passes=canaries,
        review_page=page,
        records_path=records_path,
        episodes_not_reverified=sum(_status(i) == _EPISODE for i in items),
    )


def _tool_episode(rec: EvalRecord, task: Task) -> bool:
    """A record of an agent episode: its actions span several turns, so its last answer alone
    ("Done.") is not a response the task's single-response verifier can judge."""
    return is_episode_record(len(rec.extra.get("turns") or ()), task)


def _reverify(picked: list[tuple[str, EvalRecord]], tasks: dict[str, Task], service: Service) -> list[dict[str, Any]]:
    found = [(tasks[rec.task_id], rec) for _, rec in picked
             if rec.task_id in tasks and not _tool_episode(rec, tasks[rec.task_id])]
    verdicts = iter(service.verify_pairs([(task, rec.completion) for task, rec in found]))
    items = []
    for source, rec in picked:
        item: dict[str, Any] = {"source": source, "record": rec.to_json(), "now": None, "agree": None}
        task = tasks.get(rec.task_id)
        if task is None:
            item["note"] = "task not found; pass --tasks FILE or --suite"
            items.append(item)
            continue
        if _tool_episode(rec, task):  # counted as unverified, never as a disagreement
            item["now"] = {"outcome": "not re-verified", "reward": None, "error_class": None, "feedback": "",
                           "hack_flags": [], "verifier_version": verifier_version(task.domain)}
            item["note"] = "an agent episode: its actions span several turns; its last answer alone is not re-verified"
            items.append(item)
            continue
        verdict = next(verdicts)
        now = record_from_verdict(verdict, task_id=task.id, domain=task.domain, completion=rec.completion,
                                  verifier_version=verifier_version(task.domain), stage="audit")
        item["now"] = {"outcome": now.outcome, "reward": now.reward, "error_class": now.error_class,
                       "feedback": now.feedback, "hack_flags": list(now.hack_flags),
                       "verifier_version": now.verifier_version}
        if not verdict.is_infra_error:
            item["agree"] = verdict.passed and not now.hack_flags
        items.append(item)
    return items


_REVIEW_SCRIPT = """
document.getElementById('download').addEventListener('click', function () {
  var out = [];
  var items = document.querySelectorAll('.item');
  for (var i = 0; i < items.length; i++) {
    var it = items[i];
    var choice = it.querySelector('input[type=radio]:checked');
    out.push({task_id: it.getAttribute('data-task'), source: it.getAttribute('data-source'),
              decision: choice ? choice.value : null, notes: it.querySelector('textarea').value});
  }
  var blob = new Blob([JSON.stringify(out, null, 2)], {type: 'application/json'});
  var a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = 'review.json';
  a.click();
});
document.body.setAttribute('data-ready', '1');
"""


_EPISODE = "agent episode, not re-verified"


def _status(item: dict[str, Any]) -> str:
    if item["now"] is None:
        return "missing task"
    if item["now"]["outcome"] == "not re-verified":
        return _EPISODE
    if item["agree"] is None:
        return "infra error on re-verify"
    return "agree" if item["agree"] else "DISAGREE"


_TEXT = 20_000
"""Characters of a prompt, completion or feedback the review page shows (a 10 MB completion made a page no
browser opens); the rest is counted, not shown."""


def _item_html(i: int, item: dict[str, Any]) -> str:
    rec, now = item["record"], item["now"] or {}
    status = _status(item)
    kind = {"agree": "pass", "DISAGREE": "fail"}.get(status, "infra")
    name = f"d{i}"
    return (
        f'<details class="traj item" data-kind="{kind}" data-task="{escape(rec["task_id"])}" '
        f'data-source="{escape(item["source"])}"{" open" if status == "DISAGREE" else ""}>'
        f'<summary><span class="badge {kind}">{escape(status)}</span> {as_text(item["source"])} · task '
        f'<b><bdi>{as_text(rec["task_id"])}</bdi></b> · sample {rec["sample_idx"]} · attempt {rec["attempt"]}</summary>'
        f'<table class="review"><tr><th></th><th>stored</th><th>now</th></tr>'
        f'<tr><th>outcome</th><td>{escape(rec["outcome"])}</td><td>{escape(str(now.get("outcome", "–")))}</td></tr>'
        f'<tr><th>verifier</th><td>{escape(rec["verifier_version"])}</td><td>{escape(str(now.get("verifier_version", "–")))}</td></tr>'
        f'<tr><th>hack flags</th><td>{as_text(", ".join(rec["hack_flags"]))}</td><td>{as_text(", ".join(now.get("hack_flags", [])))}</td></tr>'
        f'<tr><th>feedback</th><td>{as_text(rec["feedback"], limit=_TEXT, multiline=True)}</td>'
        f'<td>{as_text(now.get("feedback", ""), limit=_TEXT, multiline=True)}</td></tr></table>'
        f'<h4>prompt</h4><pre>{as_text(rec["prompt"], limit=_TEXT, multiline=True)}</pre>'
        f'<h4>completion</h4><pre>{as_text(rec["completion"], limit=_TEXT, multiline=True)}</pre>'
        f'<p><label><input type="radio" name="{name}" value="right"> looks right</label> '
        f'<label><input type="radio" name="{name}" value="wrong"> looks wrong</label></p>'
        f'<textarea rows="2" cols="80" placeholder="notes"></textarea></details>'
    )


def _review_html(run: Path, items: list[dict[str, Any]], population: int, canaries: int = 0) -> str:
    order = {"DISAGREE": 0, "infra error on re-verify": 1, "missing task": 2, _EPISODE: 3, "agree": 4}
    ordered = sorted(items, key=lambda it: order[_status(it)])
    n_dis = sum(it["agree"] is False for it in items)
    body = "".join(_item_html(i, it) for i, it in enumerate(ordered))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>posttrain audit: {escape(run.name)}</title><style>{CSS}</style></head><body>"
        f"<h1>Audit of {escape(run.name)}</h1><p>{len(items)} of {population} passed records, re-verified with the "
        f"current verifiers: <b>{n_dis} disagreement(s)</b>"
        + (f"; <b>{canaries} passing attempt(s) on canary tasks</b> (hack alarms: no honest response passes a "
           f"canary)" if canaries else "") + ". Go through each item, mark it, then "
        '<button id="download">download my review (JSON)</button>.</p>'
        f"{body}<script>{_REVIEW_SCRIPT}</script></body></html>"
    )
