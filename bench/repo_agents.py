"""Terminal-Bench's standard for the repo domain: the oracle, the no-op and every cheat agent, played
through the same episodes, runner, tools and template as a model, over the examples and generated tasks.

    python bench/repo_agents.py [--generated 200] [--agents oracle,noop,...] [--out runs/repo-agents]

Each (task set, agent) is one ``posttrain eval`` run, the command a checkpoint or an endpoint is
evaluated with::

    posttrain eval --tasks TASKS --episodes agent --agent NAME --max-turns 30 --max-new-tokens 8192 \
        --workers 2 --json --out OUT/<set>/<agent>

run in a subprocess of its own, and skipped when its ``summary.json`` exists (the runs are long on two
loaded cores: run this in the background, rerun it to go on). Then it prints README's table: per
agent and task set, the tasks, first-attempt and post-repair pass rate (the examples and packs allow
3 attempts with feedback), steps (actions) and tokens per episode (the embedded default's template:
one token a character), tool-call validity, wall time per episode (the environment's: its tool
calls and gradings) and per verification (a ``submit`` that was graded), infra errors, and the fail
classes seen. The oracle must pass everything, every other agent nothing, and no run may have an
infra error (the script exits 1 otherwise).
"""

from __future__ import annotations

import collections
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EXAMPLES = ROOT / "examples" / "tasks" / "repo.jsonl"


def generated_file(out: Path, n: int, seed: int) -> Path:
    """``n`` pack tasks (``generate_tasks(n, seed=)``) written as a task file, once."""
    from posttrain.envs import get_domain, task_to_record

    path = out / f"generated-{n}-seed{seed}.jsonl"
    if not path.is_file():
        out.mkdir(parents=True, exist_ok=True)
        tasks = get_domain("repo").generate_tasks(n, seed=seed)
        path.write_text("".join(json.dumps(task_to_record(t)) + "\n" for t in tasks))
    return path


def known_agents(text: str, known: list[str]) -> list[str]:
    """``--agents`` ("a,b"; empty: every one of ``known``) checked against ``known`` before any run:
    a ValueError naming the first unknown or repeated name."""
    names = [a.strip() for a in text.split(",") if a.strip()] or known
    for i, name in enumerate(names):
        if name not in known:
            raise ValueError(f"--agents {text!r}: unknown agent {name!r} (expected some of {', '.join(known)})")
        if name in names[:i]:
            raise ValueError(f"--agents {text!r}: {name} is given twice (expected distinct names)")
    return names


def run_one(tasks: Path, agent: str, out: Path, workers: int, episodes: str) -> float:
    """One ``posttrain eval`` of ``agent`` on ``tasks`` into ``out`` (skipped when done): its wall seconds."""
    if (out / "summary.json").is_file():
        return float(json.loads((out / "wall.json").read_text())["wall_s"]) if (out / "wall.json").is_file() else 0.0
    cmd = [sys.executable, "-m", "posttrain.cli", "eval", "--tasks", str(tasks), "--episodes", episodes,
           "--agent", agent, "--max-turns", "30", "--max-new-tokens", "8192", "--workers", str(workers),
           "--json", "--out", str(out)]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}\n{res.stderr[-3000:]}")
    (out / "wall.json").write_text(json.dumps({"wall_s": wall}))
    return wall


def row(out: Path) -> dict:
    """The table's figures of one run directory (its summary and records)."""
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if line.strip()]
    ep = summary["episodes"]
    per_episode: dict[tuple, float] = collections.defaultdict(float)
    graded, classes = [], collections.Counter()
    for r in records:
        if r["attempt"] == 0:
            classes[r["error_class"] or "pass"] += 1
        for turn in r.get("turns") or ():
            for c in turn.get("calls") or ():
                per_episode[(r["task_id"], r["sample_idx"])] += c["seconds"]
                if c["name"] == "submit" and not c["result"].startswith("(The same submission") \
                        and "Nothing to grade" not in c["result"]:
                    graded.append(c["seconds"])
    return {
        "tasks": summary["n_tasks"], "first": ep["first_attempt_pass_rate"], "post": ep["post_repair_pass_rate"],
        "steps": ep["turns"], "tokens": ep["episode_tokens"], "validity": ep["tool_call_validity"],
        "episode_s": statistics.fmean(per_episode.values()) if per_episode else 0.0,
        "verify_s": statistics.fmean(graded) if graded else None, "infra": summary["infra_errors"],
        "classes": dict(classes.most_common(3)),
    }


def table(rows: dict[tuple[str, str], dict]) -> str:
    head = ("| agent | tasks | first attempt | post-repair | steps / ep. | tokens / ep. | tool-call validity | "
            "wall / ep. (s) | wall / verification (s) | infra | fails as |\n|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for (name, which), r in rows.items():
        verify = "–" if r["verify_s"] is None else f"{r['verify_s']:.2f}"
        validity = "–" if r["validity"] is None else f"{r['validity']:.2f}"
        fails = ", ".join(f"{k} {v}" for k, v in r["classes"].items() if k != "pass") or "–"
        lines.append(f"| {name} | {which} {r['tasks']} | {r['first']:.0%} | {r['post']:.0%} | {r['steps']:.1f} | "
                     f"{r['tokens']:.0f} | {validity} | {r['episode_s']:.1f} | {verify} | {r['infra']} | {fails} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser, check_out_dir

    p = bench_parser("repo_agents", __doc__)
    p.add_argument("--generated", type=int, default=200, help="pack tasks (0: the examples only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--agents", default="", help="comma-separated (default: oracle, noop, every cheat)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "repo-agents")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--episodes", default="agent", help="the episode kind's name (agent)")
    args = p.parse_args(argv)
    if min(args.generated, args.seed) < 0 or args.workers < 1:
        p.error("--generated and --seed must be >= 0, --workers >= 1")
    from posttrain.envs.repo._agents import CHEATS

    try:
        agents = known_agents(args.agents, ["oracle", "noop", *CHEATS])
        check_out_dir(args.out, "--out")
    except ValueError as e:
        p.error(str(e))
    sets = [("examples", EXAMPLES)]  # (label, task file); a generated set's runs go under its file's stem
    if args.generated:
        sets.append(("generated", generated_file(args.out, args.generated, args.seed)))
    return sweep(agents, sets, args.out, workers=args.workers, episodes=args.episodes)


def sweep(agents: list[str], sets: list[tuple[str, Path]], root: Path, *, workers: int, episodes: str,
          say: str = "") -> int:
    """Each agent on each (label, task file) set, one ``posttrain eval`` run under ``root`` (a generated
    set's runs in a directory named after its file: one per N and seed); prints the table; 1 unless the
    oracle passed everything, every other agent nothing, and no run had an infra error."""
    rows: dict[tuple[str, str], dict] = {}
    for name in agents:
        for which, tasks in sets:
            out = root / (which if which == "examples" else tasks.stem) / name
            wall = run_one(tasks, name, out, workers, episodes)
            rows[(name, which)] = row(out)
            print(f"{say}{name} on {which}: {rows[(name, which)]} ({wall:.0f} s)", file=sys.stderr, flush=True)
    print(table(rows))
    bad = [k for k, r in rows.items() if r["infra"] or (r["post"] != (1.0 if k[0] == "oracle" else 0.0))]
    if bad:
        print(f"NOT AS REQUIRED: {bad}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
