"""``posttrain report RUN_DIR [RUN_DIR ...]``: one self-contained HTML page for a run, or several compared.

    posttrain report runs/quickstart              # writes runs/quickstart/report.html
    posttrain report runs/a runs/b                # both runs on the same axes: runs/a/compare.html
    python -c "from posttrain.evaluate import write_report; print(write_report('runs/quickstart'))"

The page holds learning curves from ``RUN/metrics.jsonl``, each stage on its own axis (SFT's 1,500
steps and RL's 200 do not share one), with real ticks, hover values and a smoothing slider (reward,
pass rate per domain, loss, KL, entropy, clip fraction, tokens/s, and the other logged scalars);
panels whose every curve is constant over the stage (KL without a reference, clip fraction
on-policy) are folded behind a toggle. Then the eval table with bootstrap intervals from
``RUN/summary.json`` (or recomputed from ``RUN/eval/*.jsonl``), the execution service's counters,
attempt histograms, and example trajectories from ``RUN/trajectories/*.jsonl`` (prompt, attempts,
feedback, verdicts; for multi-turn episodes each turn's observation, action and verdict) with a filter
for failures, infra errors and hack flags. Given several runs, every curve has one series per run and
the tables one row per run and model. Charts are inline SVG and the scripts inline: no external JS,
CSS, fonts or images, so the file opens offline in any browser.

**Adding a panel.** A panel is a titled section drawn from the runs: ``render(runs) -> str`` (HTML;
"" leaves it out), placed by ``order`` (the core sections are 10-50). Register one in-process with
``add_panel(title, render, order=...)``, or, for posttrain's own, with a line in ``BUILTIN_PANELS``
(``title: "module:attr"`` of a ``Panel``, imported when a report is drawn). Draw charts with
``posttrain.evaluate._svg.line_chart`` / ``bar_chart``: they get the same ticks, hover values,
smoothing and legend. A panel that raises is one line in its section, never a failed report.

What it does not do: run anything, verify anything, or serve the page.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from posttrain.config import parse_yaml
from posttrain.errors import UserError, refuse_directory
from posttrain.evaluate._curves import curves_html
from posttrain.evaluate._page import CHART_SCRIPT, CSS, SCRIPT
from posttrain.evaluate._svg import as_text, bar_chart
from posttrain.evaluate.baseline import SETTINGS
from posttrain.evaluate.records import EvalRecord, json_lines, read_records
from posttrain.evaluate.summary import summarize
from posttrain.strict_json import StrictJSONError, finite_float, loads_strict

__all__ = ["write_report", "load_run", "render_report", "RunData", "Panel", "add_panel", "report_panels",
           "BUILTIN_PANELS", "RUN_FILES"]

_MAX_EXAMPLES_PER_KIND = 12
_MAX_TEXT = 4000
_MAX_TURNS = 40
_MAX_CALLS = 20
_MAX_STEP = 2**63 - 1
RUN_FILES = ("config.yaml", "metrics.jsonl", "summary.json", "eval", "trajectories")
"""What a run directory holds from its start (config.yaml) or later; a directory with none of them is no run."""


@dataclass(frozen=True)
class RunData:
    """What a report is drawn from; every part may be empty (a run in progress)."""

    run_dir: Path
    metrics: tuple[dict[str, Any], ...] = ()
    summary: dict[str, Any] = field(default_factory=dict)
    evals: dict[str, tuple[EvalRecord, ...]] = field(default_factory=dict)
    trajectories: dict[str, tuple[EvalRecord, ...]] = field(default_factory=dict)
    config_text: str = ""
    label: str = ""
    """The run's name on the page: its directory's name (made unique among compared runs)."""


def _read_jsonl_dicts(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a run's log, one a line. Its last line cut short (no line end: the run is
    writing it, or a kill cut it) is left out, as ``--resume`` leaves it out; any other line that is
    not a JSON object, or bytes that are not UTF-8, a ``UserError`` naming ``path:line`` (before: a
    cut last line was refused, a report of a run in progress with it, and a stray byte was
    UnicodeDecodeError's traceback)."""
    rows = []
    for where, row in json_lines(path, cut_last=True):
        if not isinstance(row, dict):
            raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
        step = row.get("step")  # a step "0" or of 400 digits was drawn (at 0, or off every axis)
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= _MAX_STEP):
            shown = json.dumps(step)
            shown = shown if len(shown) <= 60 else f"{shown[:40]}... ({len(shown)} characters)"
            raise UserError(f"{where}: field 'step' must be an integer from 0 to 2**63-1, got {shown}")
        if not isinstance(row.get("stage", ""), str):
            raise UserError(f"{where}: field 'stage' must be a string, got {type(row['stage']).__name__}")
        rows.append(row)
    return rows


def _read_summary(path: Path) -> dict[str, Any]:
    """A run's summary.json: one strict JSON object (a NaN, an Infinity or a key given twice is no summary
    posttrain wrote: ``{"eval": NaN}`` drew a page without its eval table); a byte-order mark is read past."""
    try:
        summary = loads_strict(_read_text(path).removeprefix("\ufeff"), max_chars=None, max_depth=None)
    except StrictJSONError as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(summary, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(summary).__name__}")
    if summary.get("eval") is not None and not isinstance(summary["eval"], dict):
        raise UserError(f"{path}: field 'eval' must be an object of evaluations, got {type(summary['eval']).__name__}")
    return summary


def _read_config(path: Path) -> str:
    """A run's config.yaml, as text: the resolved recipe, a YAML mapping (a list, or text that is no
    YAML, is no recipe posttrain wrote: it was shown as the run's recipe)."""
    text = _read_text(path)
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as e:
        raise UserError(f"{path}: not valid YAML ({' '.join(str(e).split())[:200]}); expected the run's resolved "
                        "recipe") from None
    if data is not None and not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of sections (the run's resolved recipe), got {type(data).__name__}")
    return text


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})") from None


def load_run(run_dir: str | Path) -> RunData:
    """Read the parts of a run directory the report draws (docs/contracts.md, "Run directory");
    ``UserError`` (one line) for a directory that is missing or holds no run."""
    run = Path(run_dir)
    if not run.is_dir():
        raise UserError(f"{run}: run directory not found")
    if not any((run / name).exists() for name in RUN_FILES):
        raise UserError(f"{run}: not a posttrain run directory (it has none of {', '.join(RUN_FILES)}); "
                        "give the --out directory of a `posttrain run`")
    refuse_directory(run / "metrics.jsonl", "the run's metrics.jsonl")  # was passed over: a report without curves
    metrics = _read_jsonl_dicts(run / "metrics.jsonl") if (run / "metrics.jsonl").is_file() else []
    summary = _read_summary(run / "summary.json") if (run / "summary.json").is_file() else {}
    evals = {p.stem: tuple(read_records(p)) for p in sorted((run / "eval").glob("*.jsonl"))}
    trajs = {p.stem: tuple(read_records(p)) for p in sorted((run / "trajectories").glob("*.jsonl"))}
    config = _read_config(run / "config.yaml") if (run / "config.yaml").is_file() else ""
    return RunData(run, tuple(metrics), summary, evals, trajs, config, run.name)


def _eval_summaries(data: RunData) -> dict[str, dict[str, Any]]:
    """Each evaluation of a run, with the ``eval_protocol`` it was sampled under where the run states
    one (summary.json's, beside its entries; ``RUN/eval/summary@<tag>.json``'s for ``<model>@<tag>``
    records of ``posttrain eval --run``)."""
    out: dict[str, dict[str, Any]] = {}
    given = data.summary.get("eval", {}) if isinstance(data.summary.get("eval"), dict) else {}
    stated = data.summary.get("eval_protocol")
    for name, entry in given.items():
        if isinstance(entry, dict):
            out[name] = {"eval_protocol": stated, **entry} if isinstance(stated, dict) else entry
    for name, recs in data.evals.items():
        if name not in out and recs:
            try:
                out[name] = summarize(recs)
            except UserError as e:  # "records: ..." -- which records
                path = data.run_dir / "eval" / f"{name}.jsonl"
                raise UserError(f"{path}: {str(e).removeprefix('records: ')}") from None
            if (protocol := _tagged_protocol(data.run_dir, name)) is not None:
                out[name]["eval_protocol"] = protocol
    return out


def _tagged_protocol(run_dir: Path, name: str) -> dict[str, Any] | None:
    """The ``eval_protocol`` of ``RUN/eval/summary@<tag>.json`` for records named ``<model>@<tag>``;
    None when there is no such file or it states none (the page still draws the rates)."""
    if "@" not in name:
        return None
    path = run_dir / "eval" / f"summary@{name.split('@', 1)[1]}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return None
    protocol = data.get("eval_protocol") if isinstance(data, dict) else None
    return protocol if isinstance(protocol, dict) else None


def _cell(entry: dict[str, Any], key: str) -> str:
    v = finite_float(entry.get(key))
    if v is None:
        return '<td class="muted">–</td>'
    ci = entry.get("ci", {}).get(key) if isinstance(entry.get("ci"), dict) else None
    if isinstance(ci, list) and len(ci) == 2:
        return f'<td>{v:.3f} <span class="ci">[{ci[0]:.3f}, {ci[1]:.3f}]</span></td>'
    return f"<td>{v:.3f}</td>"


def _infra_as_fail_cell(entry: dict[str, Any]) -> str:
    """pass@1 with the evaluation's infra-dropped first attempts as failures (``summarize``'s
    ``infra_as_fail``): pass@1 itself when none was dropped, a dash when a summary lost some but
    predates the figure. Beside pass@1 so that infra errors where a model fails do not read as a gain."""
    if isinstance(entry.get("infra_as_fail"), dict):
        return _cell(entry["infra_as_fail"], "pass@1")
    return _cell(entry, "pass@1") if entry.get("infra_dropped_samples") == 0 else '<td class="muted">–</td>'


def _eval_table(summaries: dict[str, dict[str, Any]]) -> str:
    if not summaries:
        return '<p class="muted">No evaluation yet (RUN/summary.json or RUN/eval/*.jsonl).</p>'
    rate_keys = sorted(
        {k for e in summaries.values() for k in e if k.startswith(("pass@", "pass^", "repair@"))},
        key=lambda k: (k[:5], int(k.split("@")[-1].split("^")[-1]) if k[-1].isdigit() else 0),
    )
    lost = any(isinstance(e.get("infra_as_fail"), dict) for e in summaries.values())
    head = "".join(f"<th>{as_text(k)}</th>" for k in rate_keys) + ("<th>pass@1, infra as fail</th>" if lost else "")
    rows = []
    for name, e in summaries.items():
        cells = "".join(_cell(e, k) for k in rate_keys) + (_infra_as_fail_cell(e) if lost else "")
        rows.append(
            f"<tr><th>{as_text(name)}</th>{cells}<td>{as_text(e.get('n_tasks', '–'))}</td>"
            f"<td>{as_text(e.get('infra_errors', 0))}</td><td>{as_text(e.get('hack_flagged', 0))}</td></tr>"
        )
    table = (
        f'<table class="eval"><tr><th>model</th>{head}<th>tasks</th><th>infra errors</th><th>hack flags</th></tr>'
        + "".join(rows)
        + "</table>"
    )
    domains = [(name, dom, d) for name, e in summaries.items()
               for dom, d in sorted((e.get("per_domain") or {}).items()) if isinstance(d, dict)]
    # a domain whose failures were infra errors reads high over the tasks left: its infra-as-fail beside it
    dom_lost = any(isinstance(d.get("infra_as_fail"), dict) for _, _, d in domains)
    dom_rows = [
        f"<tr><th>{as_text(name)}</th><td>{as_text(dom)}</td>{_cell(d, 'pass@1')}"
        + (_infra_as_fail_cell(d) if dom_lost else "")
        + f"<td>{as_text(d.get('n_tasks', '–'))}</td><td>{as_text(d.get('passed', '–'))}</td>"
        f"<td>{as_text(d.get('infra_errors', 0))}</td></tr>"
        for name, dom, d in domains
    ]
    if dom_rows:
        table += (
            '<h3>Per domain</h3><table class="eval"><tr><th>model</th><th>domain</th><th>pass@1 [95% CI]</th>'
            + ("<th>pass@1, infra as fail</th>" if dom_lost else "")
            + "<th>tasks</th><th>passed</th><th>infra errors</th></tr>" + "".join(dom_rows) + "</table>"
        )
    table += _episodes_table(summaries)
    bars = []
    for name, e in summaries.items():
        v = finite_float(e.get("pass@1"))
        ci = (e.get("ci") or {}).get("pass@1")
        if v is not None:
            bars.append((name, v, tuple(ci) if isinstance(ci, list) and len(ci) == 2 else None))
    chart = bar_chart("pass@1 (first attempt), 95% CI clustered by task", bars, y_max=1.0)
    noop = {n: e["noop"] for n, e in summaries.items() if isinstance(e.get("noop"), dict)}
    note = "".join(  # a floor the summary does not have (every no-op verification an infra error) is not 0
        f'<p class="muted">no-op baseline ({as_text(n)}): pass@1 = {finite_float(v.get("pass@1")):.3f}</p>'
        for n, v in noop.items() if finite_float(v.get("pass@1")) is not None
    )
    note += "".join(
        f'<p class="muted">{as_text(n)}: repair@r rounds saw feedback of kind <b>{as_text(str(e["repair_feedback_source"]))}</b> '
        "(success within r feedback rounds; not an i.i.d. pass@k)</p>"
        for n, e in summaries.items()
        if e.get("repair_feedback_source")
    )
    note += _task_sets_note(summaries)
    note += _settings_note(summaries)
    note += (
        '<p class="muted">pass@1: first attempts; intervals: 95% bootstrap over tasks; infra errors are left out '
        "of the rates and counted apart.</p>"
    )
    return f'<div class="charts">{chart}</div>{table}{note}'


def _task_sets_note(summaries: dict[str, dict[str, Any]]) -> str:
    """A warning when the evaluations side by side are over different task sets (``task_set``): an
    evaluation over fewer or other tasks is not the same figure (one that left out what it failed
    would read as a gain), or over the same ids asking other prompts (``task_prompts``: an edited task
    file); empty when they agree or say nothing of their tasks."""
    sets = {n: e["task_set"] for n, e in summaries.items() if isinstance(e.get("task_set"), dict)}
    if len({json.dumps(v, sort_keys=True) for v in sets.values()}) < 2:
        prompts = {n: e["task_prompts"] for n, e in summaries.items() if isinstance(e.get("task_prompts"), dict)}
        if len({json.dumps(v, sort_keys=True) for v in prompts.values()}) < 2:
            return ""
        return (f'<p><b>not comparable:</b> these evaluations ask other prompts under the same task ids: '
                f'{", ".join(as_text(n) for n in prompts)}; their rates are not of the same tasks.</p>')
    listed = ", ".join(f"{as_text(n)} ({as_text(str(v.get('n', '?')))} tasks)" for n, v in sets.items())
    return (f'<p><b>not comparable:</b> these evaluations are over different task sets: {listed}; '
            "their rates are not of the same tasks.</p>")


def _settings_note(summaries: dict[str, dict[str, Any]]) -> str:
    """A warning when the evaluations side by side were sampled with different settings (their
    ``eval_protocol``'s ``baseline.SETTINGS``: greedy against temperature 1, 512 tokens against 24):
    not the same rate, as ``compare`` does not judge them; empty when those that state a setting agree."""
    stated = {n: e["eval_protocol"] for n, e in summaries.items() if isinstance(e.get("eval_protocol"), dict)}
    apart = []
    for key in SETTINGS:
        values = {n: p[key] for n, p in stated.items() if key in p}
        distinct: list[Any] = []  # by equality: a recipe's temperature 1 is the command line's 1.0
        for v in values.values():
            distinct += [] if v in distinct else [v]
        if len(distinct) > 1:
            apart.append(f"{key}: " + ", ".join(f"{as_text(n)} {as_text(json.dumps(v))}" for n, v in values.items()))
    if not apart:
        return ""
    return (f'<p><b>not comparable:</b> these evaluations were sampled with different settings ({"; ".join(apart)}); '
            "their rates are not the same measure.</p>")


_EPISODE_FIGURES = (
    ("first attempt", "first_attempt_pass_rate"), ("post-repair", "post_repair_pass_rate"),
    ("mean attempts to success", "mean_attempts_to_success"), ("tool-call validity", "tool_call_validity"),
    ("turns / episode", "turns"), ("tokens / episode", "episode_tokens"), ("truncation rate", "truncation_rate"),
)


def _episodes_table(summaries: dict[str, dict[str, Any]]) -> str:
    """The episodes' figures (``summary["episodes"]``) of the models evaluated in episodes."""
    figures = {n: e["episodes"] for n, e in summaries.items() if isinstance(e.get("episodes"), dict)}
    if not figures:
        return ""
    head = "".join(f"<th>{as_text(label)}</th>" for label, _ in _EPISODE_FIGURES)
    rows = []
    for name, f in figures.items():
        cells = "".join('<td class="muted">–</td>' if finite_float(f.get(k)) is None else f"<td>{finite_float(f.get(k)):.3f}</td>"
                        for _, k in _EPISODE_FIGURES)
        rows.append(f"<tr><th>{as_text(name)}</th>{cells}</tr>")
    return ('<h3>Episodes</h3><table class="eval episodes"><tr><th>model</th>' + head + "</tr>" + "".join(rows)
            + '</table><p class="muted">post-repair: success within every attempt allowed; tool-call validity: '
              "calls that parse and name a tool with valid arguments / all calls (– when none was made).</p>")


def _episodes(records: Sequence[EvalRecord]) -> dict[tuple, list[EvalRecord]]:
    eps: dict[tuple, list[EvalRecord]] = defaultdict(list)
    for r in records:
        eps[(r.stage, r.step if r.step is not None else -1, r.task_id, r.sample_idx)].append(r)
    for recs in eps.values():
        recs.sort(key=lambda r: r.attempt)
    return eps


def _episode_kind(recs: Sequence[EvalRecord]) -> str:
    if any(r.hack_flags for r in recs):
        return "hack"
    if any(r.passed for r in recs):
        return "pass"
    if any(r.is_infra_error for r in recs):
        return "infra"
    return "fail"


def _attempt_bucket(recs: Sequence[EvalRecord]) -> str:
    for r in recs:
        if r.passed:
            return str(r.attempt + 1)
        if r.is_infra_error:
            return "infra"
    return "failed"


def _histograms(groups: dict[str, Sequence[EvalRecord]]) -> str:
    charts = []
    for name, recs in groups.items():
        counts = Counter(_attempt_bucket(eps) for eps in _episodes(recs).values())
        if not counts:
            continue
        numeric = sorted((k for k in counts if k.isdigit()), key=int)
        labels = [*numeric, *(k for k in ("failed", "infra") if k in counts)]
        bars = [(f"{k} att." if k.isdigit() else k, float(counts[k]), None) for k in labels]
        charts.append(bar_chart(f"{name}: attempts to success ({sum(counts.values())} episodes)", bars))
    if not charts:
        return '<p class="muted">No records yet.</p>'
    return '<div class="charts">' + "".join(charts) + "</div>"


def _clip(text: str) -> str:
    return as_text(text, limit=_MAX_TEXT, multiline=True)


def _episode_html(source: str, key: tuple, recs: Sequence[EvalRecord]) -> str:
    stage, step, task_id, sample_idx = key
    kind = _episode_kind(recs)
    head = (
        f'<span class="badge {kind}">{kind}</span> {as_text(source)} · task <b><bdi>{as_text(task_id)}</bdi></b> · '
        f"sample {sample_idx}" + (f" · step {step}" if step >= 0 else "") + f" · {len(recs)} attempt(s)"
    )
    parts = [f"<h4>prompt</h4><pre>{_clip(recs[0].prompt)}</pre>"]
    for r in recs:
        flags = f' <span class="badge hack">{as_text(", ".join(r.hack_flags))}</span>' if r.hack_flags else ""
        reward = "null" if r.reward is None else f"{r.reward:.3g}"
        parts.append(
            f'<div class="attempt"><h4>attempt {r.attempt} (feedback in context: {as_text(r.feedback_source)}) → '
            f'<span class="badge {"infra" if r.is_infra_error else r.outcome}">{as_text(r.outcome)}</span> '
            f"reward {reward}{' · ' + as_text(r.error_class) if r.error_class else ''}{flags}</h4>"
            + (_turns_html(r.extra["turns"]) if isinstance(r.extra.get("turns"), list)
               else f"<pre>{_clip(r.completion)}</pre>")
            + (f'<div class="fb">feedback:<pre>{_clip(r.feedback)}</pre></div>' if r.feedback else "")
            + "</div>"
        )
    return f'<details class="traj" data-kind="{kind}"><summary>{head}</summary>{"".join(parts)}</details>'


def _turns_html(turns: Sequence[Any]) -> str:
    """Each turn of a multi-turn record (``turns``, docs/records.md): observation, action, verdict."""
    rows = []
    for i, t in enumerate(turns[:_MAX_TURNS]):
        if not isinstance(t, dict):
            continue
        obs = t.get("observation")
        verdict = t.get("verdict")
        badge = (f'<span class="badge {"infra" if verdict == "infra_error" else as_text(str(verdict))}">'
                 f"{as_text(str(verdict))}</span>" if verdict else '<span class="muted">no verdict</span>')
        rows.append(
            f'<tr class="turn"><td>{i}</td>'
            f"<td>{'<span class=muted>(the prompt)</span>' if obs is None else '<pre>' + _clip(str(obs)) + '</pre>'}</td>"
            f"<td><pre>{_clip(str(t.get('action', '')))}</pre>{_calls_html(t.get('calls'))}</td><td>{badge}"
            f"{' · ' + as_text(str(t['stop_reason'])) if t.get('stop_reason') else ''}</td></tr>")
    if len(turns) > _MAX_TURNS:  # a model's thousand turns do not bury the page's other rows
        rows.append(f'<tr><td colspan="4" class="muted">… {len(turns) - _MAX_TURNS} more turns not shown</td></tr>')
    return ('<table class="review turns"><tr><th>turn</th><th>observation</th><th>action</th><th>verdict</th></tr>'
            + "".join(rows) + "</table>")


def _calls_html(calls: Any) -> str:
    """A turn's tool calls (a workspace agent's, docs/records.md): each call, whether it ran, its time
    and its result as the model saw it."""
    if not isinstance(calls, list) or not calls:
        return ""
    rows = []
    for c in calls[:_MAX_CALLS]:
        if not isinstance(c, dict):
            continue
        given = c.get("arguments")
        args = ", ".join(f"{k}={v!r}" if len(repr(v)) <= 80 else f"{k}=<{len(str(v))} chars>"
                         for k, v in given.items()) if isinstance(given, dict) else repr(given)
        state = "ran" if c.get("ok") else "refused"
        seconds = finite_float(c.get("seconds"))
        rows.append(f'<div class="call"><b>{as_text(c.get("name"))}</b>({as_text(args, limit=400)}) '
                    f'<span class="muted">{state} · {"?" if seconds is None else f"{seconds:.2f}"} s</span>'
                    f'<pre>{_clip(str(c.get("result", "")))}</pre></div>')
    if len(calls) > _MAX_CALLS:
        rows.append(f'<p class="muted">… {len(calls) - _MAX_CALLS} more calls not shown</p>')
    return "".join(rows)


def _trajectories(groups: dict[str, Sequence[EvalRecord]]) -> str:
    picked: list[str] = []
    totals: Counter[str] = Counter()
    for source, recs in groups.items():
        by_kind: dict[str, list[tuple]] = defaultdict(list)
        eps = _episodes(recs)
        for key, ep in eps.items():
            by_kind[_episode_kind(ep)].append(key)
        for kind, keys in by_kind.items():
            totals[kind] += len(keys)
            # latest steps first: what the policy does now is what a reader wants to see
            for key in sorted(keys, key=lambda k: (-k[1], k[2], k[3]))[:_MAX_EXAMPLES_PER_KIND]:
                picked.append(_episode_html(source, key, eps[key]))
    if not picked:
        return '<p class="muted">No trajectories yet (RUN/trajectories/*.jsonl).</p>'
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(totals.items()))
    select = (
        '<label>show <select id="kind-filter"><option value="all">all</option>'
        '<option value="fail">failures</option><option value="infra">infra errors</option>'
        '<option value="hack">hack flags</option><option value="pass">passes</option></select></label> '
        f'<span class="muted">episodes in files: {as_text(counts)}; showing up to {_MAX_EXAMPLES_PER_KIND} '
        'of each kind per file, latest steps first</span> <span id="shown" class="muted"></span>'
    )
    return select + "".join(picked)


def _sched_table(summary: dict[str, Any], label: str = "") -> str:
    """The execution service's counters over the run and each breaker's last state (``summary["sched"]``)."""
    sched = summary.get("sched")
    if not isinstance(sched, dict):
        return ""
    counts = "".join(f"<tr><th>{as_text(k)}</th><td>{v}</td></tr>" for k, v in sched.items() if finite_float(v) is not None)
    breakers = sched.get("breakers") if isinstance(sched.get("breakers"), dict) else {}
    states = "".join(f"<tr><th>breaker {as_text(str(k))}</th><td>{as_text(str(v))}</td></tr>" for k, v in breakers.items())
    head = f"<h3>{as_text(label)}</h3>" if label else ""
    return f'{head}<table class="eval">{counts}{states}</table>'


@dataclass(frozen=True)
class Panel:
    """A titled section of the report: ``render(runs)`` returns its HTML ("" leaves it out)."""

    title: str
    render: Callable[[Sequence[RunData]], str]
    order: int = 100


def _labelled(runs: Sequence[RunData], part: str) -> dict[str, Any]:
    """``part`` (evals, trajectories) of every run, keyed ``label: name`` when there are several runs."""
    many = len(runs) > 1
    return {(f"{r.label}: {k}" if many else k): v for r in runs for k, v in getattr(r, part).items()}


def _eval_panel(runs: Sequence[RunData]) -> str:
    many = len(runs) > 1
    return _eval_table({(f"{r.label}: {k}" if many else k): v for r in runs for k, v in _eval_summaries(r).items()})


def _sched_panel(runs: Sequence[RunData]) -> str:
    return "".join(_sched_table(r.summary, r.label if len(runs) > 1 else "") for r in runs)


def _histograms_panel(runs: Sequence[RunData]) -> str:
    return _histograms({**{f"eval/{k}": v for k, v in _labelled(runs, "evals").items()},
                        **{f"trajectories/{k}": v for k, v in _labelled(runs, "trajectories").items()}})


def _trajectories_panel(runs: Sequence[RunData]) -> str:
    groups = {f"trajectories/{k}": v for k, v in _labelled(runs, "trajectories").items()}
    return _trajectories(groups or {f"eval/{k}": v for k, v in _labelled(runs, "evals").items()})


CORE_PANELS = (
    Panel("Learning curves", curves_html, 10),
    Panel("Evaluation", _eval_panel, 20),
    Panel("Execution service", _sched_panel, 30),
    Panel("Attempts to success", _histograms_panel, 40),
    Panel("Example trajectories", _trajectories_panel, 50),
)
BUILTIN_PANELS: dict[str, str] = {"Per domain (RL)": "posttrain.evaluate._domains:DOMAIN_PANEL",
                                   "Hack alarms (canaries)": "posttrain.evaluate._domains:CANARY_PANEL",
                                   "Renders": "posttrain.evaluate.views:VIEWS_PANEL"}
"""posttrain's own further panels: title -> ``module:attr`` of a ``Panel``, imported when a report is drawn."""
_ADDED: dict[str, Panel] = {}


def add_panel(title: str, render: Callable[[Sequence[RunData]], str], *, order: int = 100) -> None:
    """Register a panel for the reports this process draws (the module docstring); a title once.

    >>> add_panel("Doctest panel", lambda runs: "<p>hello</p>", order=99)
    >>> [p.title for p in report_panels()][-1]
    'Doctest panel'
    """
    if title in _ADDED and _ADDED[title].render is not render:
        raise ValueError(f"report panel {title!r} is already registered")
    _ADDED[title] = Panel(title, render, order)


def _broken(title: str, error: Exception) -> Panel:
    return Panel(title, lambda runs: f'<p class="muted">this panel did not load: {as_text(type(error).__name__)}: '
                                     f"{as_text(error, limit=300)}</p>")


def report_panels() -> list[Panel]:
    """Every panel a report draws, by ``order``: the core sections, ``BUILTIN_PANELS``, ``add_panel``'s."""
    panels = list(CORE_PANELS)
    for title, spec in BUILTIN_PANELS.items():
        module, _, attr = spec.partition(":")
        try:
            panels.append(getattr(importlib.import_module(module), attr))
        except Exception as e:  # noqa: BLE001 - a broken panel is one line in the page, not a failed report
            panels.append(_broken(title, e))
    panels += _ADDED.values()
    return sorted(panels, key=lambda p: p.order)


def _section(panel: Panel, runs: Sequence[RunData]) -> str:
    try:
        body = panel.render(runs)
    except Exception as e:  # noqa: BLE001 - one line in its section, never a failed report
        body = f'<p class="muted">this panel failed: {as_text(type(e).__name__)}: {as_text(e, limit=300)}</p>'
    return f"<h2>{as_text(panel.title)}</h2>{body}" if body else ""


def render_report(data: RunData | Sequence[RunData]) -> str:
    """The HTML text of the report of one run, or of several compared (``write_report`` writes it)."""
    runs = [data] if isinstance(data, RunData) else list(data)
    configs = "".join(f"<details><summary>resolved config of {as_text(r.label)} (config.yaml)</summary>"
                      f"<pre>{as_text(r.config_text, limit=None, multiline=True)}</pre></details>" for r in runs if r.config_text)
    title = "posttrain report: " + " vs ".join(r.label for r in runs)
    where = "<br>".join(as_text(r.run_dir, limit=None) for r in runs)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{as_text(title, limit=None)}</title><style>{CSS}</style></head><body>"
        f'<h1>{as_text(title, limit=None)}</h1><p class="muted">{where}</p>{configs}'
        + "".join(_section(p, runs) for p in report_panels())
        + f"<script>{SCRIPT}</script><script>{CHART_SCRIPT}</script></body></html>"
    )


def _unique_labels(runs: Sequence[RunData]) -> list[RunData]:
    """The runs, labelled by their directory's name, else parent/name, else with a number appended."""
    names = [r.run_dir.name for r in runs]
    out, seen = [], set()
    for r, name in zip(runs, names, strict=True):
        label = name if names.count(name) == 1 else f"{r.run_dir.parent.name}/{name}"
        base, k = label, 2
        while label in seen:
            label, k = f"{base} ({k})", k + 1
        seen.add(label)
        out.append(dataclasses.replace(r, label=label))
    return out


def write_report(run_dir: str | Path | Sequence[str | Path], out: str | Path | None = None) -> Path:
    """Write ``RUN/report.html`` (or ``out``) and return its path; given several run directories, one
    page comparing them (default ``FIRST_RUN/compare.html``).

    >>> import tempfile, pathlib; d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "config.yaml").write_text("seed: 0")
    >>> write_report(d).name
    'report.html'
    """
    dirs = [run_dir] if isinstance(run_dir, str | Path) else list(run_dir)
    if not dirs:
        raise UserError("report: give at least one run directory")
    runs = _unique_labels([load_run(d) for d in dirs])
    path = Path(out) if out is not None else runs[0].run_dir / ("report.html" if len(runs) == 1 else "compare.html")
    path.parent.mkdir(parents=True, exist_ok=True)
    # whole or not at all: a run killed mid-write kept half a page for good (its summary.json was
    # written, so the resume said "already finished" and only checks that the page exists)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(render_report(runs), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
