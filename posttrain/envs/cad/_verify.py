"""The cad verifier: response -> script -> sandboxed render -> mesh checks in a worker -> Verdict.

Where each step runs, and why:

- extraction and the static check (``_script.py``): here, on text only (linear scans);
- the render (``_render.py``): a fresh sandbox job per script, the candidate's and (once per task
  per process) the gold's: OpenSCAD parses and evaluates the candidate's program (a candidate script
  that is the gold's text, byte for byte, is judged on the gold's render);
- the mesh checks (``_mesh.py``): a ``posttrain.verify._deadline`` worker on the host, under a
  CPU budget (``CPU_BUDGET_S``) and a 2 GiB address-space limit. Not in the sandbox: its only
  Python is Debian's ``/usr/bin/python3``, without numpy or manifold3d, and the checks are ours,
  not the candidate's (only their input, the STL, is). Not in this process: a hostile STL must
  not cost the trainer; its size is capped by the sandbox before it gets here, a check that
  burns its CPU budget is the candidate's ``timeout``, a worker that dies on it twice is its
  ``checker_crash``, and nothing raises into the caller.

Blame: the candidate's script, its render and its mesh can only cost the candidate a ``fail``.
``infra_error`` comes only from our side: the sandbox failing, a job starved of CPU by a loaded
host (``infra:starved``, decided from CPU time), the check worker not starting or starved, or the
task's own gold not rendering to a valid solid (``infra:gold``: a broken task; ``posttrain tasks
validate`` reports it). Each render's report names the script it rendered and each check's reply the
part it checked (their SHA-256); one that is another's is infra (``infra:sandbox``, ``infra:checker``),
so that no candidate is ever judged on another's render.
"""

from __future__ import annotations

import base64
import hashlib
import math
import time
from typing import Any

from posttrain.envs._base import Verifier, fail, guard
from posttrain.envs.cad._holes import body_checks
from posttrain.envs.cad._render import MAX_STL_BYTES, Render, gold_key, gold_render, render_stl
from posttrain.envs.cad._script import extract_script, script_problem
from posttrain.types import Task, Verdict
from posttrain.verify._deadline import CheckPool, shared_pool, verdict_of

NAME = "cad"
CPU_BUDGET_S = 30.0
"""CPU seconds one mesh check may use (a 300k-triangle part's booleans take a few)."""
GOLD_MARGIN = 4.0
"""A candidate's render may use this many times the CPU time of the gold's own render at the finest
faceting the prompt invites (``FINE_COST``), or the task's ``timeout_s`` of CPU, whichever is more:
the limit follows the reference's cost, as EvalPlus derives its time limits from the reference
solution's. A level-5 disc of bolt holes and counterbores takes OpenSCAD 2021 ~15 s on a loaded host.
CPU time, not wall time: a render slowed by a loaded host is not its timeout (under a wall-time limit
of 4 x the gold's wall time, an ablation of a gold timed out in a full test suite on 2 cores)."""
FINE_COST = 8.0
"""What the prompt's finest faceting (``$fn = 128``, ``_domain.INSTRUCTIONS``) costs OpenSCAD over the
gold's ``$fn = 48``: CGAL's time grows with the facets, as ``$fn`` for a cylinder and its square for a
sphere. Measured on the generator's heaviest golds (levels 5-6) 4.3-5.7x (3.7 s of CPU became 19 s),
25 holes in a plate 5.9x, a sphere cut from a cube 7.7x. Under 4 x the gold's own time the right
part at $fn = 128 timed out wherever the gold took over 5 s (the 25 holes: 30 s against 20.5)."""
WALL_FACTOR = 4.0
"""The render's wall-time limit is this many times its CPU limit: with a quarter of a CPU or more the
CPU limit comes first, so a wall timeout is a job that got less (the sandbox's starvation rule: the
host's probe decides, and a starved job is rerun once)."""
_CHECKS_MODULE = "posttrain.envs.cad._mesh"
_FORMAT_HINT = "Reply with the complete OpenSCAD script in one ```openscad code block."


def _render_failure(part: Render, task: Task, cpu_s: float, evidence: dict[str, Any]) -> Verdict:
    said = f"\nOpenSCAD said:\n{part.messages}" if part.messages else ""
    if part.status == "timeout":
        text = (f"Rendering needed more than {math.ceil(cpu_s)} s of CPU time: simplify the model (lower $fn, "
                "fewer objects, no minkowski() of detailed shapes).")
    elif part.status == "memory":
        text = f"Rendering ran out of memory ({task.limits.memory_mb} MiB): simplify the model."
    elif part.status == "too_large":
        text = f"The exported mesh is larger than {MAX_STL_BYTES >> 20} MiB: lower $fn."
    else:
        text = "The script does not build a 3D part." + (said or " OpenSCAD reported no error; check that the "
                                                         "script ends in a 3D object.")
        return fail(text, "build", evidence)
    return fail(text + said, part.status, evidence)


def _check_verdict(outcome: Any, part_sha256: str) -> Verdict:
    if outcome.status == "ok" and "gold_error" in outcome.result:
        return Verdict.infra(f"the task's gold is not a valid solid: {outcome.result['gold_error']}",
                             error_class="infra:gold")
    if outcome.status == "ok" and outcome.result["evidence"].get("part_sha256") != part_sha256:
        return Verdict.infra("cad checker: the reply is not for this part", error_class="infra:checker")
    return verdict_of(outcome, NAME)


def verify_cad(pool: Any, checks: CheckPool, task: Task, response: str) -> Verdict:
    """One verdict (module docstring); never raises for anything the response does."""
    t0 = time.monotonic()
    script, how = extract_script(response)
    if script is None:
        return fail(f"Answer format: {how}. {_FORMAT_HINT}", "format", {"extraction": how})
    problem = script_problem(script)
    if problem:
        cls, why = problem
        return fail(f"The script was not rendered: {why}. {_FORMAT_HINT if cls == 'format' else ''}".strip(),
                    cls, {"extraction": how})
    gold = gold_render(pool, task.fields["gold"])  # first: its CPU time sets the candidate's limit
    cpu = task.limits.timeout_s if gold.status != "ok" else max(task.limits.timeout_s,
                                                                GOLD_MARGIN * FINE_COST * gold.cpu_s)
    # The gold's own text renders to the gold's part (OpenSCAD is deterministic, and the candidate's
    # limit is at least the gold's): not rendered twice. A policy tuned on gold scripts repeats them.
    same = gold.status == "ok" and script == task.fields["gold"]
    part = gold if same else render_stl(pool, script, timeout_s=WALL_FACTOR * cpu, memory_mb=task.limits.memory_mb,
                                        cpu_s=cpu)
    evidence: dict[str, Any] = {"extraction": how, "render_s": part.duration_s, "render_cpu_s": part.cpu_s,
                                "render_limit_s": round(cpu, 2), "peak_memory_mb": part.peak_memory_mb}
    if same:
        evidence["render"] = "the gold's (the same script)"
    if part.messages:
        evidence["openscad"] = part.messages
    if part.status == "infra":
        return Verdict.infra(f"sandbox: {part.detail}", error_class="infra:starved" if part.starved else
                             "infra:sandbox", evidence=evidence)
    if part.status != "ok":
        return _render_failure(part, task, cpu, evidence)
    if gold.status != "ok":
        detail = gold.messages or gold.detail or gold.status
        cls = "infra:starved" if gold.starved else "infra:sandbox" if gold.status == "infra" else "infra:gold"
        return Verdict.infra(f"the task's gold does not render ({gold.status}): {detail}", error_class=cls,
                             evidence=evidence)
    outcome = checks.run({"part": base64.b64encode(part.stl).decode(), "gold": base64.b64encode(gold.stl).decode(),
                          "gold_key": gold_key(task.fields["gold"]), "iou": task.fields["iou"],
                          "tolerance_mm": task.fields["tolerance_mm"], "holes": task.fields["holes"],
                          "rounds": [*task.fields["rounds"], *body_checks(task.fields.get("round_bodies", []))]})
    verdict = _check_verdict(outcome, hashlib.sha256(part.stl).hexdigest())
    timing = {"check_s": round(outcome.wall_s, 4), "check_cpu_s": round(outcome.cpu_s, 4),
              "verify_s": round(time.monotonic() - t0, 4)}
    return Verdict(outcome=verdict.outcome, reward=verdict.reward, feedback=verdict.feedback,
                   error_class=verdict.error_class, evidence={**evidence, **verdict.evidence, **timing},
                   components=verdict.components)


def make_cad_verifier(pool: Any, checks: CheckPool | None = None) -> Verifier:
    """A verifier for cad tasks that renders in ``pool`` (a ``posttrain.sandbox`` pool) and checks
    meshes in ``checks`` (default: this process's shared pool of 2 cad check workers)."""
    if pool is None or not callable(getattr(pool, "exec", None)):
        raise TypeError("the cad verifier needs a sandbox pool with exec (posttrain.sandbox.open_pool)")

    def verify(task: Task, response: str) -> Verdict:
        return verify_cad(pool, checks or shared_pool(_CHECKS_MODULE, cpu_budget_s=CPU_BUDGET_S), task, response)

    return guard(NAME, verify)
