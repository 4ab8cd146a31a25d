"""Every domain: generators (reference 1, no-op 0, deterministic), example files, record round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posttrain.envs import DOMAINS, get_env, task_to_record
from posttrain.errors import TaskError
from posttrain.tasks._load import load_tasks
from posttrain.verify.batch import pool_for, verify_many

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


@pytest.mark.parametrize("domain", DOMAINS)
def test_generated_tasks_reference_passes_noop_fails(domain: str, request) -> None:
    env = get_env(domain)
    tasks = env.generate_tasks(16, seed=3)
    assert len({t.id for t in tasks}) == 16 and all(t.domain == domain for t in tasks)
    pool = request.getfixturevalue("pool") if domain == "code" else None
    refs = verify_many([(t, t.reference) for t in tasks], pool)
    noops = verify_many([(t, env.noop_response(t)) for t in tasks], pool)
    assert [v.outcome for v in refs] == ["pass"] * 16, [v.feedback for v in refs if not v.passed]
    assert [v.outcome for v in noops] == ["fail"] * 16


@pytest.mark.parametrize("domain", DOMAINS)
def test_exploit_fixtures_fail_on_the_batch_path(domain: str, request) -> None:
    """Every domain ships exploits (reward-hacking.md, issue 14); through ``verify_many`` (the path
    training uses, batched sandbox jobs for code) each one is a ``fail``, never a pass or infra."""
    fixtures = get_env(domain).exploit_fixtures()
    assert fixtures and len({name for name, _, _ in fixtures}) == len(fixtures)
    pool = request.getfixturevalue("pool") if domain == "code" else None
    verdicts = verify_many([(task, response) for _, task, response in fixtures], pool)
    # The one infra error allowed is a check starved of CPU by the machine (measured by its CPU
    # time, which a response cannot fake): on a loaded host the CPU-burning exploits run at once.
    wrong = {name: (v.outcome, v.error_class) for (name, _, _), v in zip(fixtures, verdicts, strict=True)
             if v.outcome != "fail" and v.error_class != "infra:starved"}
    assert wrong == {}


@pytest.mark.parametrize("domain", DOMAINS)
def test_generators_are_deterministic_and_round_trip(domain: str) -> None:
    env = get_env(domain)
    a, b = env.generate_tasks(8, seed=11), env.generate_tasks(8, seed=11)
    assert a == b and a != env.generate_tasks(8, seed=12)
    for t in a:
        record = json.loads(json.dumps(task_to_record(t)))
        assert env.parse_task(record, "roundtrip") == t


@pytest.mark.parametrize("domain", DOMAINS)
def test_render_prompt(domain: str) -> None:
    env = get_env(domain)
    (t,) = env.generate_tasks(1, seed=0)
    if domain in ("math", "code"):
        assert env.render_prompt(t) == t.prompt
    else:
        assert t.prompt in env.render_prompt(t)


@pytest.mark.parametrize("domain", DOMAINS)
def test_example_files_have_ten_tasks_that_validate(domain: str, request) -> None:
    tasks = load_tasks(EXAMPLES / f"{domain}.jsonl")
    assert len(tasks) >= 10 and all(t.reference for t in tasks)
    from posttrain.tasks.cli import check_tasks

    pool = request.getfixturevalue("pool") if domain == "code" else None
    assert check_tasks(tasks, pool) == []


def test_unknown_domain() -> None:
    with pytest.raises(TaskError, match="unknown domain 'chess'"):
        get_env("chess")


def test_pool_for_opens_nothing_without_code_tasks() -> None:
    (t,) = get_env("math").generate_tasks(1)
    with pool_for([t]) as pool:
        assert pool is None
