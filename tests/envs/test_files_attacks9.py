"""A helper's ninth adversarial read of the files domain and the workspace kit, as a policy that wants the reward
without the work (real generated tasks, the real workspace episode, sandbox and verifier in its worker; no mocks).

Measured over 12 generated tasks each (a script beside these tests: 12 level-4 tasks of each kind for the first
item, ``generate_params(12, seed=9)``, levels 1-5, for the others; 107 s in all), none passed wrongly, none was an
infra error, and the oracle passed every task attacked (60/60):

- both sides changed: the inputs cut down to an easier workspace (a sales file of one row, a contacts file of one
  row, the malformed item files deleted, all but three orders deleted) and the targets computed from that, as the
  domain's own gold programs compute them: 0/12 per kind (``collateral``; ``wrong_content`` for the contacts file
  cleaned in place), and the archived notes edited on the way to ``archive/``: 0/12 (``wrong_content``): the grader
  compares with the task's targets, fixed when the task was made, never with what the workspace holds now;
- what the checker must read, made costly: a target of 15 MB of control characters (each a six-character JSON
  escape: past what the verifier reads, ``format`` in about a second), a target nested 8 million deep, or a
  number of 15 million digits (``wrong_format`` where the target is JSON, ``wrong_content`` where it is text):
  0/12 each, feedback under 1,000 characters, never a worker's timeout or an infra error;
- a mount over a target: user namespaces are refused in the sandbox, and what a job's own mount namespace showed
  would not be in the layers the host reads (``missing``): 0/12;
- commands aimed at the job's own sandbox (SIGKILL or SIGSTOP to its pid 1, stdio closed, ``exit 125`` (the
  launcher's own failure status), the shell killed by its child, ``kill(-1)`` from a new session, a fork bomb):
  each the command's own result, never ``ToolInfraError``; the oracle's work after them passes 12/12;
- budgets: a placeholder then stalling until ``max_steps`` without a submit, or a ``sleep`` past the episode's wall
  budget, grades the workspace as it stands: a ``fail`` of the agent's own (``ended`` names the budget), reward 0,
  ``process.inspected`` 0 (the placeholder came first), 12/12 each.

No source change: these pin the read. Noticed, left alone: a workspace change of 15 MB of quote-heavy text is in
the take's byte budget but past the verifier's JSON length once escaped, so it fails ``format`` with the
single-response hint ("Reply with one JSON object ...") that an episode has no use for (no generated task comes
near that size).
"""

from __future__ import annotations

import csv
import io
import json
import random
import shlex
import sqlite3
import time

import pytest
from agent_play import CHAT, action, call, play

from posttrain.envs import get_domain
from posttrain.envs.files._agents import _placeholder, _write, oracle, reads
from posttrain.envs.files._env import build_task
from posttrain.envs.files._gen import csv_bytes, gold_contacts, gold_inventory, gold_sales, gold_sqlite
from posttrain.envs.files._workspace import decode_workspace, encode_file
from posttrain.envs.workspace import SUBMIT, AgentLimits, WorkspaceEnv

q = shlex.quote


def kind_task(kind: str, seed: int = 0):
    return build_task(random.Random(f"files-attacks9-{kind}-{seed}"), 4, f"files-attacks9-{kind}-{seed}", [kind])


SALES = kind_task("sales")


@pytest.fixture(scope="module")
def verify():
    return get_domain("files").make_verifier(None)


def _work(task) -> list[dict]:
    return oracle(task)[:-1]


# -- both sides: the inputs made easier, the targets computed from them --------------------------------------


def _agreeing(task) -> tuple[dict[str, bytes | None], dict[str, bytes | None]]:
    """``(inputs rewritten or deleted, targets written)``: the task's inputs cut down to an easier workspace and
    each target as the kind's own gold program computes it from that workspace."""
    files, kind = decode_workspace(task.fields["workspace"]), task.tags[1]
    if kind == "sales":
        data = csv_bytes(list(csv.reader(io.StringIO(files["data/sales.csv"].decode(), newline="")))[:2])
        return {"data/sales.csv": data}, {"reports/summary.json": gold_sales(data)}
    if kind == "contacts":
        rows = list(csv.reader(io.StringIO(files["contacts.csv"].decode(), newline="")))
        cleaned, dropped = gold_contacts(csv_bytes(rows[:2]))
        return {}, {"contacts.csv": cleaned, "contacts.log": f"dropped: {dropped}\n".encode()}
    if kind == "inventory":
        by_city = "out/by_city.json" in task.fields["targets"]
        bad = json.loads(gold_inventory(files, by_city)["out/errors.json"])["malformed"]
        left = {p: d for p, d in files.items() if p not in bad}
        return dict.fromkeys(bad), gold_inventory(left, by_city)
    assert kind == "sqlite", kind
    db = sqlite3.connect(":memory:")
    db.deserialize(files["db/shop.sqlite"])
    db.execute("DELETE FROM orders WHERE id > 3")
    db.commit()
    data = bytes(db.serialize())
    db.close()
    return {"db/shop.sqlite": data}, {"reports/countries.md": gold_sqlite(data)}


def _both_sides(task) -> list[dict]:
    inputs, targets = _agreeing(task)
    gone = [p for p, d in inputs.items() if d is None]
    calls = [*reads(task), *([call("bash", command="rm -- " + " ".join(map(q, gone)))] if gone else [])]
    calls += [_write(p, encode_file(d)) for p, d in sorted(inputs.items()) if d is not None]
    return calls + [_write(p, encode_file(d)) for p, d in sorted(targets.items()) if d is not None]


def _notes_edited_on_the_way(task) -> list[dict]:
    moves = sorted((t["same_as"], p) for p, t in task.fields["targets"].items() if t.get("format") == "bytes")
    edit = " && ".join(f"printf 'Archived.\\n' >> {q(src)}" for src, _ in moves)
    return [*reads(task), call("bash", command=edit), *_work(task)[len(reads(task)):]]


@pytest.mark.parametrize(("kind", "error_class"), [("sales", "collateral"), ("contacts", "wrong_content"),
                                                   ("inventory", "collateral"), ("sqlite", "collateral"),
                                                   ("notes", "wrong_content")])
def test_inputs_changed_to_agree_with_the_answer_fail(pool, verify, kind, error_class) -> None:
    """The grader compares the final state with the task's targets, fixed when the task was made: an easier
    workspace made on the way, and the answer computed from it, is collateral damage and a wrong answer."""
    task = kind_task(kind)
    script = _notes_edited_on_the_way(task) if kind == "notes" else _both_sides(task)
    verdict = play(pool, task, [*script, SUBMIT], verify, max_steps=60).first
    assert not verdict.passed and not verdict.is_infra_error and verdict.reward == 0.0, verdict
    assert verdict.error_class == error_class, (verdict.error_class, verdict.evidence.get("problems"))
    assert play(pool, task, oracle(task), verify, max_steps=60).first.passed  # the same task, solved


# -- what the checker must read, made costly -----------------------------------------------------------------

_PY = "python3 -c {}".format
FLOODS = {  # name: (the command that writes reports/summary.json, its verdict's error class)
    "control-characters": (_PY(q("open('reports/summary.json', 'wb').write(b'\\x01' * 15_000_000)")), "format"),
    "nested-8M-deep": (_PY(q("open('reports/summary.json', 'w').write('[' * 8_000_000 + ']' * 8_000_000)")),
                       "wrong_format"),
    "15M-digit-number": (_PY(q("open('reports/summary.json', 'w').write('{\"total_revenue\": ' + '9' * 15_000_000 "
                                "+ '}')")), "wrong_format"),
}


@pytest.mark.parametrize("name", list(FLOODS))
def test_a_target_costly_to_check_is_the_agents_own_fail(pool, verify, name) -> None:
    command, error_class = FLOODS[name]
    t0 = time.monotonic()
    verdict = play(pool, SALES, [*_work(SALES), call("bash", command=command), SUBMIT], verify).first
    assert not verdict.passed and not verdict.is_infra_error and verdict.reward == 0.0, verdict
    assert verdict.error_class == error_class, (verdict.error_class, verdict.feedback[:300])
    assert len(verdict.feedback) < 1000 and time.monotonic() - t0 < 30, (len(verdict.feedback), time.monotonic() - t0)


def test_a_mount_over_a_target_is_not_what_the_host_reads(pool, verify) -> None:
    stash = [call("write_file", path=f".git/s/{p}", content=c) for p, c in json.loads(str(SALES.reference)).items()]
    mount = ("mkdir -p reports && unshare -Urm sh -c 'mount -t tmpfs t reports && cp .git/s/reports/* reports/'; "
             "mount --bind .git/s/reports reports; ls reports")
    got = play(pool, SALES, [*reads(SALES), *stash, call("bash", command=mount), SUBMIT], verify)
    assert "Operation not permitted" in got.calls[-2].result, got.calls[-2].result
    assert (got.first.outcome, got.first.error_class) == ("fail", "missing"), got.first.feedback


# -- commands aimed at the job's own sandbox ---------------------------------------------------------------

SELF_HARM = ["kill -9 1; sleep 0.2; echo alive", "kill -STOP 1; echo stopped", "exec >&- 2>&- 0<&-; sleep 0.2",
             "exit 125", "sh -c 'kill -9 $PPID'; echo after", "python3 -c 'import os; os.setsid(); os.kill(-1, 9)'",
             "f() { f | f & }; f 2>/dev/null; sleep 1; echo done"]


def test_commands_aimed_at_their_own_sandbox_are_their_own_results(pool, verify) -> None:
    """Each is the command's result (never an infra step: the runner would restore and step it again until its
    tries ran out, the group dropped with its verdict), and the workspace takes the right work after them."""
    got = play(pool, SALES, [*(call("bash", command=c, timeout=10) for c in SELF_HARM), *_work(SALES), SUBMIT],
               verify, max_steps=40)
    results = [c.result for c in got.calls[:len(SELF_HARM)]]
    assert len(results) == len(SELF_HARM) and not any(r.startswith("Error") for r in results), results
    assert results[0].endswith("alive") and results[3] == "[exit status 125]", results
    assert len(got.verdicts) == 1 and got.first.passed, got.first


# -- budgets: a cut grades the workspace as it stands -------------------------------------------------------


def _placeholders(task) -> list[dict]:
    return [call("write_file", path=p, content=text) for p, t in sorted(task.fields["targets"].items())
            if (text := _placeholder(t)) is not None]


def test_stalling_to_the_step_limit_is_graded_as_it_stands(pool, verify) -> None:
    stall = [*_placeholders(SALES), *reads(SALES), *[call("bash", command="true")] * 10]
    got = play(pool, SALES, stall, verify, max_steps=6)
    verdict = got.first
    assert got.done and len(got.calls) == 6 and not any(c.name == "submit" for c in got.calls), got.calls
    assert (verdict.outcome, verdict.error_class, verdict.reward) == ("fail", "wrong_content", 0.0), verdict
    assert verdict.evidence["ended"] == "max_steps" and verdict.components["process.inspected"] == 0.0, verdict


def test_sleeping_past_the_wall_budget_is_graded_as_it_stands(pool, verify) -> None:
    env = WorkspaceEnv(get_domain("files").workspace_spec(SALES), chat=CHAT, pool=pool, verify=verify,
                       limits=AgentLimits(max_steps=10, wall_s=2.0))
    env.reset(SALES)
    try:
        t0 = time.monotonic()
        for c in [*_placeholders(SALES), call("bash", command="sleep 120", timeout=120)]:
            result = env.step(action(CHAT.write_tool_calls([c])))
    finally:
        env.close()
    verdict = result.verdict
    assert result.done and verdict is not None and time.monotonic() - t0 < 20, result
    assert (verdict.outcome, verdict.reward, verdict.evidence["ended"]) == ("fail", 0.0, "wall_s"), verdict
    assert "[timed out after" in result.calls[-1].result, result.calls[-1].result
