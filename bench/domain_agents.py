"""Terminal-Bench's standard for the doc, files and cad domains: the oracle, the no-op and every cheat agent,
played through the same episodes, runner, tools and template as a model, over the examples and generated tasks.

    python bench/domain_agents.py --domain files [--generated 200] [--agents oracle,noop,...] [--out runs/agents]

Each (domain, task set, agent) is one ``posttrain eval`` run, the command a checkpoint or an endpoint is
evaluated with::

    posttrain eval --tasks TASKS --episodes agent --agent NAME --max-turns 30 --max-new-tokens 8192 \\
        --workers 2 --json --out OUT/<domain>/<set>/<agent>

in a subprocess of its own, skipped when its ``summary.json`` exists: the sweeps are long on two shared cores, run this in the
background and rerun it to go on. The generated set is ``generate_tasks(N, seed=)`` of the domain (files:
levels 1-5 in turn; doc: levels 1-4, a quarter of levels 1-3 as PDFs; cad: 1-6 features). Then it prints
README's table (``bench/repo_agents.py``'s columns: first-attempt and post-repair pass rate with 3
attempts and feedback, steps and tokens per episode with the embedded default's template (a token a
character), tool-call validity, wall time per episode and per graded ``submit``, infra errors, how
the first attempts failed). The oracle must pass everything, every other agent nothing, and no run may
have an infra error (exit 1 otherwise).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from repo_agents import known_agents, sweep  # noqa: E402  (the repo domain's bench: one sweep, one table format)

DOMAINS = ("files", "doc", "cad")


def generated_file(domain: str, out: Path, n: int, seed: int) -> Path:
    """``n`` generated tasks of ``domain`` written as a task file, once."""
    from posttrain.envs import get_domain, task_to_record

    path = out / f"{domain}-generated-{n}-seed{seed}.jsonl"
    if not path.is_file():
        out.mkdir(parents=True, exist_ok=True)
        tasks = get_domain(domain).generate_tasks(n, seed=seed)
        path.write_text("".join(json.dumps(task_to_record(t)) + "\n" for t in tasks))
    return path


def agents_of(domain: str) -> list[str]:
    from posttrain.envs import get_domain

    return ["oracle", "noop", *sorted(set(get_domain(domain).scripted_agents()) - {"oracle"})]


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser, check_out_dir

    p = bench_parser("domain_agents", __doc__)
    p.add_argument("--domain", choices=DOMAINS, required=True)
    p.add_argument("--generated", type=int, default=200, help="generated tasks (0: the examples only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--agents", default="", help="comma-separated (default: oracle, noop, every cheat)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "agents")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--episodes", default="agent", help="the agent episode kind's name")
    args = p.parse_args(argv)
    if min(args.generated, args.seed) < 0 or args.workers < 1:
        p.error("--generated and --seed must be >= 0, --workers >= 1")
    try:
        agents = known_agents(args.agents, agents_of(args.domain))
        check_out_dir(args.out, "--out")
    except ValueError as e:
        p.error(str(e))

    sets = [("examples", ROOT / "examples" / "tasks" / f"{args.domain}.jsonl")]
    if args.generated:
        sets.append(("generated", generated_file(args.domain, args.out, args.generated, args.seed)))
    return sweep(agents, sets, args.out / args.domain, workers=args.workers, episodes=args.episodes,
                 say=f"{args.domain}: ")


if __name__ == "__main__":
    raise SystemExit(main())
