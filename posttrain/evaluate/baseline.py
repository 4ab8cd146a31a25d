"""``posttrain eval --baseline RUN_OR_RESULTS``: per-domain comparison against an earlier result.

A baseline is a run directory (its ``summary.json``: the ``eval`` entry of ``rl`` if present,
else the last one), a results directory or file written by ``posttrain eval --out`` (a plain
summary), or a records JSONL (summarized here). ``compare(current, baseline)`` lines up
``pass@1`` per domain (and overall) with both bootstrap intervals.

A domain *regressed* when it dropped beyond both intervals: the current value is below the
baseline's interval and the baseline value is above the current interval (the seesaw effect:
one domain improves while another quietly drops); a drop inside the noise is reported as a delta,
not flagged. Each value outside the other's interval is weaker than two intervals apart, and about a
one-sided test at 5-8%: two identical models, one sample on each of 20 tasks, were flagged 7.7% of
the time at a 0.5 rate (4.8% at uniform per-task rates).
Each interval is judged at least as wide as the Wilson interval of its rate over its ``n_samples``
(``_judged_ci``; stated in the row as ``*_judged_ci`` where it widened): resampling a few tasks that
agree gives a zero-width interval (2 tasks at 10 of 10 samples: ``[1.0, 1.0]``). A figure over one
task has no such interval; two such figures are judged by their samples' Wilson intervals, flagged
only when those are apart (``_one_task_apart``).

A gate judges all its rows at once, and two identical models fail it when any row is flagged: with
the 95% intervals, 10 domains x 20 tasks x 1 sample at a 0.5 rate flagged some domain 56% of the
time (28% at uniform per-task rates). So when a gate judges ``m`` comparable rows (its domains, plus
``compare``'s overall row unless that is its one domain again), each judged interval's half-widths
are multiplied by ``family_widening(m)`` (``sqrt(2) * z(1 - 0.05 / m) / 1.96``; 1 for one row, the
rule as before) and floored at that many standard errors of its samples at both sides' pooled rate;
the row and the output's ``family`` (``rows``, ``widening``) state it. Identical models then fail a
gate of 3 to 22 domains about 5% of the time or less; the price is power on small drops among many
domains (docs/evaluation.md has the figures).

``compare_domains(current, baselines)`` is the seesaw gate of a multi-domain run (recipe key
``eval.baselines``): each domain of ``current`` against the baseline that evaluated it (typically
a single-domain run from the same start), by the same rule; ``regressions`` names every domain
that dropped, and the run fails.

Two figures are judged only when they are over the same tasks: when both summaries carry a
``task_set`` (``summarize``) and the sets differ (an evaluation cut by ``--limit``, a responses file
that answers some of the suite, a domain left out of the mix), the row is ``comparable: False``,
listed in ``not_comparable`` and, in ``compare``, in ``regressions`` as ``<name> (different task
sets)``: a gate (``--fail-on-regression``) fails closed, as an evaluation that dropped the tasks it
failed would otherwise read as no drop. A summary without ``task_set`` (written before it existed)
is compared as before. ``compare_domains`` lists such rows in ``regressions`` too (``domain
(baseline) (different task sets)``): the seesaw gate fails closed the same way, so its baselines
must be runs that held out the same tasks.

Infra errors leave a sample out of pass@1 (attrition, not failure), so a model that sends the
verifier into infra errors on the tasks it fails reads a higher pass@1 over the same task set. A
current summary with infra-dropped first attempts carries ``infra_as_fail`` (those samples as
failures); a row whose pass@1 is not flagged is flagged when that figure regressed by the same rule,
with a ``note`` saying so (a current pass@1 missing because every sample was an infra error too).
Genuine infra flakiness on a few samples moves that figure little; it fails a gate only when the
lost samples could hide a drop beyond both intervals.

Nor when the same ids asked other questions: both summaries' ``task_prompts`` (a hash of each id
with its prompt; absent from records written without prompts) must agree, else the row is
``comparable: False`` and fails a gate as ``<name> (different task prompts)`` (a task file edited to
easier questions under the same ids read as a gain).

Nor when they were sampled otherwise: both summaries' ``eval_protocol`` (``posttrain eval`` states
it in its summary, a run's summary.json beside its entries) are held to the same ``SETTINGS``
(temperature, max_new_tokens, chat, max_turns, prompt_format, each where both state it); a row of an
evaluation sampled with other settings is ``comparable: False`` and fails a gate as ``<name>
(different settings)`` (a greedy evaluation at 512 tokens read against a run's temperature-1 figure at
24 tokens as a gain). ``prompt_format`` is how the sampler rendered the prompts (``"plain"``, or
``"chat:<16 hex>"`` of the chat template's text): a checkpoint evaluated through its chat template
against one prompted plain, or through another template, asked other token sequences; a protocol written
before it existed is compared as before (as a summary without ``task_set``). A records file
takes the protocol of the evaluation it belongs to (``_protocol_beside``). A summary without
``eval_protocol`` (responses, an older file) is compared as before.

What it does not do: pair tasks across the two runs (a delta over the same set is a difference of
means, not a paired test), or compare any rate other than pass@1 (the others are in the summaries
side by side).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist
from typing import Any

from posttrain.errors import UserError
from posttrain.evaluate.records import read_records
from posttrain.evaluate.summary import summarize

__all__ = ["load_baseline", "compare", "compare_domains", "family_widening"]


def _pick(data: dict[str, Any], where: str) -> dict[str, Any]:
    if "pass@1" in data or "per_domain" in data:
        return data
    evals = data.get("eval")
    if isinstance(evals, dict) and evals:
        name = "rl" if "rl" in evals else list(evals)[-1]
        entry = evals[name]
        if isinstance(entry, dict) and "pass@1" in entry:  # the run's settings, stated once beside its entries
            protocol = {"eval_protocol": data["eval_protocol"]} if isinstance(data.get("eval_protocol"), dict) else {}
            return {**protocol, **entry, "baseline_model": name}
    raise UserError(f"{where}: no evaluation summary found (expected 'pass@1' or an 'eval' entry with one)")


def load_baseline(path: str | Path) -> dict[str, Any]:
    """The baseline summary from a run dir, a results dir, a summary JSON, or a records JSONL."""
    path = Path(path)
    if path.is_dir():
        path = path / "summary.json"
    if not path.is_file():
        raise UserError(f"--baseline: {path} not found (expected a run dir, results dir, summary.json or records .jsonl)")
    if path.suffix == ".jsonl":
        records = read_records(path)
        try:
            summary = summarize(records)
        except UserError as e:  # "records: ..." -- which records
            raise UserError(f"--baseline {path}: {str(e).removeprefix('records: ')}") from None
        if (protocol := _protocol_beside(path)) is not None:
            summary["eval_protocol"] = protocol
        return summary
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark, as task files take it
    except json.JSONDecodeError as e:
        raise UserError(f"--baseline: {path}: not valid JSON ({e.msg})") from None
    except (UnicodeDecodeError, OSError) as e:
        raise UserError(f"--baseline: {path}: cannot read it ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise UserError(f"--baseline: {path}: expected a JSON object")
    picked = _pick(data, f"--baseline {path}")
    _check_rates(picked, f"--baseline {path}")
    per_domain = picked.get("per_domain")
    if per_domain is not None and not isinstance(per_domain, dict):
        raise UserError(f"--baseline {path}: 'per_domain' must be an object, got {per_domain!r:.60}")
    for domain, entry in (per_domain or {}).items():
        if not isinstance(entry, dict):
            raise UserError(f"--baseline {path}: per_domain.{domain} must be an object, got {entry!r:.60}")
        _check_rates(entry, f"--baseline {path}: per_domain.{domain}")
    return picked


def _protocol_beside(records: Path) -> dict[str, Any] | None:
    """The ``eval_protocol`` that the evaluation a records file belongs to states in its summary: an
    ``eval --out`` directory's ``summary.json`` beside its ``records.jsonl``, ``eval --run``'s
    ``RUN/eval/summary@<tag>.json`` beside ``RUN/eval/<name>@<tag>.jsonl`` (its entry ``<name>``'s own
    protocol where it states one: it holds how that checkpoint's prompts were rendered, which the file's
    shared one cannot), the run's own ``RUN/summary.json`` for the pipeline's ``RUN/eval/<stage>.jsonl``;
    None where none is found or it states none. Records state no settings, so a records file given as ``--baseline`` was compared
    with any evaluation (a temperature-1, 24-token baseline against a greedy 512-token evaluation was
    judged; its results directory was not). A summary there that does not read is refused (one line)."""
    if records.name == "records.jsonl":
        beside = records.parent / "summary.json"
    elif records.parent.name == "eval" and "@" in records.stem:
        beside = records.parent / f"summary@{records.stem.split('@', 1)[1]}.json"
    elif records.parent.name == "eval":
        beside = records.parent.parent / "summary.json"
    else:
        return None
    if not beside.is_file():
        return None
    try:
        data = json.loads(beside.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as e:
        raise UserError(f"--baseline {records}: the summary beside it, {beside}, does not read "
                        f"({type(e).__name__}); it states how the evaluation was sampled") from None
    entries = data.get("eval") if isinstance(data, dict) and "@" in records.stem else None
    entry = entries.get(records.stem.split("@", 1)[0]) if isinstance(entries, dict) else None
    protocol = entry.get("eval_protocol") if isinstance(entry, dict) else None
    if not isinstance(protocol, dict):
        protocol = data.get("eval_protocol") if isinstance(data, dict) else None
    return protocol if isinstance(protocol, dict) else None


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and 0.0 <= v <= 1.0  # NaN is not


def _check_rates(entry: dict[str, Any], where: str) -> None:
    """The keys ``compare`` reads: ``pass@1`` a rate or null, ``ci.pass@1`` ``[lo, hi]`` or absent (a
    hand-edited or foreign file fails here, in one line, not after the evaluation in a traceback)."""
    if entry.get("pass@1") is not None and not _number(entry["pass@1"]):
        raise UserError(f"{where}: 'pass@1' must be a number in [0, 1], got {entry['pass@1']!r:.60}")
    ci = entry.get("ci")
    if ci is not None and not isinstance(ci, dict):
        raise UserError(f"{where}: 'ci' must be an object, got {ci!r:.60}")
    bounds = (ci or {}).get("pass@1")
    if bounds is not None and not (isinstance(bounds, list) and len(bounds) == 2 and all(map(_number, bounds))
                                   and bounds[0] <= bounds[1]):
        raise UserError(f"{where}: 'ci.pass@1' must be [lo, hi] in [0, 1], got {bounds!r:.60}")


SETTINGS = ("temperature", "max_new_tokens", "chat", "max_turns", "prompt_format")
"""The ``eval_protocol`` keys that change what pass@1 measures (greedy against sampled, a longer
completion cap, another prompt rendering or step limit); two evaluations that state different
values are not compared. ``samples_per_task`` and ``seed`` are left out: another number of i.i.d.
draws, or other draws, estimate the same rate. ``chat`` is the flag given to ``posttrain eval``
(absent: as the checkpoint records); ``prompt_format`` is what the sampler did (``"plain"`` or
``"chat:<16 hex>"`` of the template's text, ``evaluate.sources.prompt_format``), as every key held
where both sides state it."""


def _settings_apart(current: dict[str, Any], baseline: dict[str, Any]) -> str | None:
    """The ``SETTINGS`` two summaries' ``eval_protocol`` both state and differ on, as one phrase
    (``temperature: current 0.0, baseline 1.0``); None when none differ or a side states none. Two
    ``posttrain eval`` protocols are also held to the same ``episodes`` (agent against single: a task
    answered once against one answered over several tool turns).

    A key one side leaves out is not compared: a protocol written before ``prompt_format`` existed
    against one that states it compares as before (its rendering is not known; a baseline evaluated
    again states it), as a summary with no ``eval_protocol`` at all (``--responses``: sampled
    elsewhere, by a rendering posttrain never saw) states no settings."""
    c, b = current.get("eval_protocol"), baseline.get("eval_protocol")
    if not isinstance(c, dict) or not isinstance(b, dict):
        return None
    if "max_attempts" in c and "max_attempts" in b:  # both posttrain eval's: it states episodes for agent ones only
        c, b = {"episodes": None, **c}, {"episodes": None, **b}  # (single or repair: the same first attempts)
    apart = [f"{k}: current {c[k]!r}, baseline {b[k]!r}" for k in ("episodes", *SETTINGS)
             if k in c and k in b and c[k] != b[k]]
    return "; ".join(apart) or None


def _row(cur: dict[str, Any], base: dict[str, Any], settings: str | None = None, widen: float = 1.0) -> dict[str, Any]:
    c, b = cur.get("pass@1"), base.get("pass@1")
    c_ci, b_ci = (cur.get("ci") or {}).get("pass@1"), (base.get("ci") or {}).get("pass@1")
    row: dict[str, Any] = {"current": c, "current_ci": c_ci, "baseline": b, "baseline_ci": b_ci, "comparable": True}
    c_set, b_set = cur.get("task_set"), base.get("task_set")
    if c_set is not None and b_set is not None and c_set != b_set:  # the same rate over other tasks
        n = [x.get("n", "?") if isinstance(x, dict) else "?" for x in (c_set, b_set)]
        row.update(comparable=False, delta=None if c is None or b is None else c - b, regressed=False,
                   apart="different task sets",
                   note=f"different task sets (current: {n[0]} tasks, baseline: {n[1]}); not judged")
        return row
    c_prompts, b_prompts = cur.get("task_prompts"), base.get("task_prompts")
    if c_prompts is not None and b_prompts is not None and c_prompts != b_prompts:  # the same ids, other questions
        row.update(comparable=False, delta=None if c is None or b is None else c - b, regressed=False,
                   apart="different task prompts",
                   note="the same task ids asking other prompts (an edited or regenerated task file); not judged")
        return row
    if settings is not None:  # the same tasks, another rate (greedy against sampled, another length cap)
        row.update(comparable=False, delta=None if c is None or b is None else c - b, regressed=False,
                   apart="different settings", note=f"different settings ({settings}); not judged")
        return row
    if c is None or b is None:
        row.update(delta=None, regressed=False, note="pass@1 missing on one side")
    else:
        row["delta"] = c - b
        if not (c_ci and b_ci):
            row.update(regressed=False, note="no interval on one side; not judged")
            if (apart := _one_task_apart(cur, base, widen)) is not None:
                row.update(regressed=apart, note="one task: judged by its samples' Wilson intervals, "
                           + ("apart" if apart else "overlapping"))
        else:
            c_n, b_n = cur.get("n_samples"), base.get("n_samples")
            pooled = _pooled(c, c_n, b, b_n)
            c_j, b_j = _judged_ci(c, c_ci, c_n, widen, pooled), _judged_ci(b, b_ci, b_n, widen, pooled)
            row["regressed"] = bool(c < b_j[0] and b > c_j[1])
            if (c_j, b_j) != (c_ci, b_ci):
                row.update(current_judged_ci=c_j, baseline_judged_ci=b_j)
    if not row["regressed"] and (why := _regressed_infra_as_fail(cur, base, b_ci, widen)) is not None:
        row.update(regressed=True, note=why)
    return row


FAMILY_ALPHA = 0.05
"""The false-flag rate a whole gate aims at for two identical models, however many rows it judges."""


def family_widening(m: int) -> float:
    """The factor each judged interval's half-widths are multiplied by when a gate judges ``m`` rows
    at once (its comparable domain rows, plus ``compare``'s overall row unless that is its one domain
    again): 1 for one row (the 95% intervals as stated), else ``sqrt(2) * z(1 - FAMILY_ALPHA / m) / z(0.975)``
    (``_judged_ci`` also floors a widened interval at the pooled rate's standard errors).

    Why: with two intervals of equal half-width ``z * s``, "each value outside the other's interval"
    flags a difference beyond ``z * s``, whose noise is ``sqrt(2) * s``: one row at ``z = 1.96``
    false-flags about 8% one-sidedly, and a gate over 10 identical domains flagged some domain half the
    time. Scaled so that ``z = sqrt(2) * z(1 - FAMILY_ALPHA / m)``, each row false-flags about
    ``FAMILY_ALPHA / m`` (Bonferroni: the overall row and the domains share samples, which it allows
    for) and the gate about ``FAMILY_ALPHA`` or less. Normal approximation: a bootstrap interval's two
    sides are each scaled, and a few tasks' discrete rates land on either side of it."""
    if m <= 1:
        return 1.0
    return max(1.0, math.sqrt(2) * NormalDist().inv_cdf(1 - FAMILY_ALPHA / m) / NormalDist().inv_cdf(0.975))


def _wilson(rate: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a rate seen over ``n`` Bernoulli trials (95% at the default ``z``)."""
    d = 1 + z * z / n
    mid, half = (rate + z * z / (2 * n)) / d, z / d * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n))
    return max(0.0, mid - half), min(1.0, mid + half)


def _judged_ci(rate: float, ci: list[float], n_samples: Any, widen: float = 1.0,
               pooled: float | None = None) -> list[float]:
    """The interval a regression is judged by: the stated (task-bootstrap) one, each half-width times
    ``widen`` (``family_widening``: 1 for a single comparison), widened to at least the Wilson interval
    of the rate over its ``n_samples`` scored samples (at ``widen`` times 1.96). Two figures over the same
    tasks differ by their samples' noise, which is at most that of ``n_samples`` i.i.d. draws at the same
    mean; resampling a few tasks that agree (2 tasks at 10 of 10) gives a zero-width interval that read
    9 of 10 per task as a regression (an identical model at a 0.9 rate failed a gate 12% of the time, 2
    tasks x 10 samples; 1.3% widened). Widened for a family (``widen`` above 1), it is also at least
    ``widen * 1.96`` standard errors of ``n_samples`` draws at ``pooled`` (both sides' rate together):
    identical models agree on one rate, and a side that landed far from it (3 of 10, against 7 of 10)
    reads its own noise as smaller than it is, which in the tails a family judges by flagged identical
    models about twice as often as intended. The floors are left out where ``n_samples`` is missing (an
    older summary)."""
    lo, hi = (ci[0], ci[1]) if widen == 1.0 else (max(0.0, rate - widen * (rate - ci[0])),
                                                    min(1.0, rate + widen * (ci[1] - rate)))
    if not isinstance(n_samples, int) or isinstance(n_samples, bool) or n_samples < 1:
        return ci if widen == 1.0 else [lo, hi]
    w_lo, w_hi = _wilson(rate, n_samples, 1.96 * widen)
    if widen != 1.0 and pooled is not None:
        half = 1.96 * widen * math.sqrt(pooled * (1 - pooled) / n_samples)
        w_lo, w_hi = min(w_lo, max(0.0, rate - half)), max(w_hi, min(1.0, rate + half))
    return [min(ci[0], lo, w_lo), max(ci[1], hi, w_hi)]


def _pooled(c: float, c_n: Any, b: float, b_n: Any) -> float | None:
    """Both sides' rate over all their samples; None where either count is missing."""
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in (c_n, b_n)):
        return None
    return (c * c_n + b * b_n) / (c_n + b_n)


def _one_task_apart(cur: dict[str, Any], base: dict[str, Any], widen: float = 1.0) -> bool | None:
    """Whether one task's current pass@1 dropped with its samples' 95% Wilson intervals apart (the
    current's above end below the baseline's lower end); None unless both sides are over one task with
    scored samples. A task-bootstrap interval of one task is that task (none is stated), so such a row
    was never judged: a domain of one task at 10 of 10 samples, then 0 of 10, passed a gate. Samples of
    one task are i.i.d., so their interval is sound; apart, not each value outside the other's, since
    one sample each side (1 of 1, then 0 of 1) is no evidence (identical models: at most 0.3% apart,
    up to 20 samples each side at any rate; 5 of 5 then 0 of 5 always is). ``widen`` scales z as in
    ``_judged_ci``."""
    sides = []
    for s in (cur, base):
        n, rate = s.get("n_samples"), s.get("pass@1")
        if s.get("n_tasks") != 1 or not isinstance(n, int) or isinstance(n, bool) or n < 1 or not _number(rate):
            return None
        sides.append(_wilson(rate, n, 1.96 * widen))
    return sides[0][1] < sides[1][0]


def _regressed_infra_as_fail(cur: dict[str, Any], base: dict[str, Any], b_ci: Any, widen: float = 1.0) -> str | None:
    """Why the current figure regressed once its infra-dropped first attempts count as failures
    (``summarize``'s ``infra_as_fail``), by the same rule; None if it did not, or cannot be judged.
    Infra errors leave a sample out of pass@1's denominator, so a model that sends the verifier into
    infra errors on the tasks it fails read a higher pass@1 (all of them: no pass@1, not judged)."""
    worst, b = cur.get("infra_as_fail"), base.get("pass@1")
    if not isinstance(worst, dict) or not _number(b) or not b_ci:
        return None
    w, w_ci = worst.get("pass@1"), (worst.get("ci") or {}).get("pass@1")
    if not _number(w) or not (isinstance(w_ci, list) and len(w_ci) == 2 and all(map(_number, w_ci))):
        return None
    n, dropped = cur.get("n_samples"), cur.get("infra_dropped_samples")
    w_n = n + dropped if isinstance(n, int) and isinstance(dropped, int) else None  # every first attempt
    pooled = _pooled(w, w_n, b, base.get("n_samples"))
    w_j, b_j = _judged_ci(w, w_ci, w_n, widen, pooled), _judged_ci(b, b_ci, base.get("n_samples"), widen, pooled)
    if not (w < b_j[0] and b > w_j[1]):
        return None
    return (f"regressed with its infra-dropped samples counted as failures (pass@1 {w:.3f} "
            f"[{w_ci[0]:.3f}, {w_ci[1]:.3f}]): infra errors where it fails are not a gain")


RULE = ("regressed = current below the baseline's judged interval and baseline above the current's, by its pass@1 "
        "or by its pass@1 with infra-dropped samples as failures; judged intervals are the 95% ones for one row, "
        "widened by family.widening when a gate judges family.rows rows at once (about 5% false flags in all for "
        "identical models); figures over different task sets or prompts, or sampled with different settings, "
        "are not judged and fail the gate")
"""The rule ``compare`` and ``compare_domains`` state with their rows."""


def compare(current: dict[str, Any], baseline: dict[str, Any], *, evaluations: int = 1) -> dict[str, Any]:
    """Per-domain pass@1 against the baseline, with ``regressions`` listing domains that dropped.
    ``evaluations``: how many such comparisons one gate judges at once (``eval --run``: one per
    checkpoint, the gate failing on any), each of the same rows: the family is their rows together
    (3 checkpoints of 10 identical domains, each judged as a family of its own: 7.3% of gates failed,
    300 trials, against 2.3% for one).

    >>> cur = {"pass@1": 0.2, "ci": {"pass@1": [0.1, 0.3]}, "per_domain": {}}
    >>> base = {"pass@1": 0.8, "ci": {"pass@1": [0.7, 0.9]}, "per_domain": {}}
    >>> compare(cur, base)["overall"]["regressed"]
    True
    """
    cur_dom, base_dom = current.get("per_domain") or {}, baseline.get("per_domain") or {}
    settings = _settings_apart(current, baseline)
    pairs = {**{d: (cur_dom[d], base_dom[d]) for d in sorted(set(cur_dom) & set(base_dom))}, "overall": (current, baseline)}
    # the rows this gate judges at once; the overall row of one domain on both sides is that domain's again
    same = len(cur_dom) == 1 and set(cur_dom) == set(base_dom)
    m = sum(_row(c, b, settings)["comparable"] for d, (c, b) in pairs.items() if not (same and d == "overall"))
    m *= max(1, evaluations)
    widen = family_widening(m)
    rows = {d: _row(c, b, settings, widen) for d, (c, b) in pairs.items()}
    overall, per_domain = rows["overall"], {d: r for d, r in rows.items() if d != "overall"}
    apart = [d for d, r in rows.items() if not r["comparable"]]
    return {
        "overall": overall,
        "per_domain": per_domain,
        "only_in_current": sorted(set(cur_dom) - set(base_dom)),
        "only_in_baseline": sorted(set(base_dom) - set(cur_dom)),
        "not_comparable": apart,
        "regressions": [d for d, r in rows.items() if r["regressed"]] + [f"{d} ({rows[d]['apart']})" for d in apart],
        "family": {"rows": m, "widening": widen},
        "rule": RULE,
    }


def compare_domains(current: dict[str, Any], baselines: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each domain of ``current`` (a summary) against every baseline summary (``{name: summary}``)
    that has it: ``per_domain[d]`` lists one row per such baseline (``compare``'s row plus
    ``baseline_run``); ``regressions`` names ``domain (baseline)`` for each drop beyond both intervals,
    and ``domain (baseline) (different task sets)`` for each row over other tasks than the baseline's
    (``not_comparable``: not judged, so the gate fails closed, as ``compare``'s). A domain no baseline
    evaluated is listed in ``unbaselined``.

    >>> cur = {"per_domain": {"math": {"pass@1": 0.2, "ci": {"pass@1": [0.1, 0.3]}}, "code": {"pass@1": 0.5}}}
    >>> single = {"per_domain": {"math": {"pass@1": 0.8, "ci": {"pass@1": [0.7, 0.9]}}}}
    >>> gate = compare_domains(cur, {"runs/math-only": single})
    >>> gate["regressions"], gate["unbaselined"]
    (['math (runs/math-only)'], ['code'])
    """
    cur_dom = current.get("per_domain") or {}
    pairs = [(d, name, cur_dom[d], base["per_domain"][d], _settings_apart(current, base))
             for d in sorted(cur_dom) for name, base in baselines.items() if d in (base.get("per_domain") or {})]
    m = sum(_row(c, b, settings)["comparable"] for _, _, c, b, settings in pairs)  # the rows this gate judges at once
    widen = family_widening(m)
    per_domain: dict[str, list[dict[str, Any]]] = {}
    for d, name, c, b, settings in pairs:
        per_domain.setdefault(d, []).append({**_row(c, b, settings, widen), "baseline_run": name})
    apart = [(f"{d} ({r['baseline_run']})", r["apart"]) for d, rows in per_domain.items() for r in rows
             if not r["comparable"]]
    return {
        "per_domain": per_domain,
        "unbaselined": sorted(set(cur_dom) - set(per_domain)),
        "not_comparable": [name for name, _ in apart],
        "regressions": [f"{d} ({r['baseline_run']})" for d, rows in per_domain.items() for r in rows if r["regressed"]]
        + [f"{name} ({why})" for name, why in apart],
        "family": {"rows": m, "widening": widen},
        "rule": RULE,
    }
