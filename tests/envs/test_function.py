"""Rewards as Python functions (posttrain.envs.function): a user's own module outside posttrain,
TRL's batched form, ranges and weights, the verifier contract on broken functions, records and
recipes, the run's warnings, and `posttrain run` + `posttrain eval` end to end."""

from __future__ import annotations

import doctest
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from posttrain.envs import get_domain
from posttrain.envs.function import RewardTerm, default_reward, noop_problems
from posttrain.errors import ConfigError, TaskError

ROOT = Path(__file__).resolve().parents[2]
DOMAIN = get_domain("function")
VERIFY = DOMAIN.make_verifier(None)

USER_MODULE = '''
from posttrain.types import Verdict

def exact(prompt, completion, answer, **data):
    return completion.strip() == answer

def signed(prompt, completion, answer, **data):
    return 1.0 if completion.strip() == answer else -1.0

def short(prompts, completions, **kwargs):          # TRL's batched form
    return [max(0.0, 1.0 - len(c) / 10) for c in completions]

def judged(prompt, completion, answer, **data):
    ok = completion.strip() == answer
    return Verdict("pass" if ok else "fail", 1.0 if ok else 0.25, feedback="judged: " + ("ok" if ok else "no"))

def dodges(prompt, completion, **data):
    return Verdict.infra("cannot judge this one")

def lopsided(prompt, completion, **data):
    return Verdict("fail", 1.0, feedback="wrong, full marks anyway")

def nearly(prompt, completion, **data):
    return Verdict("fail", 1.0 - 1e-10, feedback="wrong, a pass's reward anyway")

def always(prompt, completion, **data):
    return 1.0

def wrong_signature(text):
    return 1.0

NOT_A_FUNCTION = 3
'''


@pytest.fixture(scope="module")
def user_module(tmp_path_factory):
    """A module of the user's, outside posttrain, in the directory the checks run from."""
    where = tmp_path_factory.mktemp("user")
    (where / "my_rewards_t.py").write_text(USER_MODULE)
    old = os.getcwd()
    os.chdir(where)
    yield "my_rewards_t"
    os.chdir(old)


def _task(reward, data=None, prompt="What is 3 + 4?", tid="t", **extra):
    return DOMAIN.parse_task({"id": tid, "prompt": prompt, "reward": reward, "data": data or {}, **extra}, "test")


@pytest.mark.parametrize("module", ["posttrain.envs.function", "posttrain.envs.function._spec",
                                    "posttrain.envs.function.examples"])
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0


def test_a_users_function_scores_a_completion(user_module) -> None:
    task = _task(f"{user_module}:exact", {"answer": "7"})
    good, bad = VERIFY(task, " 7\n"), VERIFY(task, "8")
    assert (good.outcome, good.reward, bad.outcome, bad.reward) == ("pass", 1.0, "fail", 0.0)
    assert good.evidence["rewards"] == {f"{user_module}:exact": 1.0}


def test_trl_batched_form_ranges_and_weights(user_module) -> None:
    short = VERIFY(_task(f"{user_module}:short"), "abcde")
    assert short.outcome == "fail" and short.reward == pytest.approx(0.5) and short.components["outcome"] == 0.5
    signed = _task([{"function": f"{user_module}:signed", "range": [-1, 1]}], {"answer": "7"})
    assert VERIFY(signed, "7").passed and VERIFY(signed, "8").reward == 0.0
    mixed = _task([{"function": f"{user_module}:exact", "weight": 3}, {"function": f"{user_module}:short"}],
                  {"answer": "7"})
    assert VERIFY(mixed, "7").reward == pytest.approx((3 * 1.0 + 0.9) / 4)  # full marks on both only: a pass
    assert not VERIFY(mixed, "7").passed


def test_a_returned_verdict_is_used_and_an_infra_verdict_refused(user_module, capsys) -> None:
    judged = _task(f"{user_module}:judged", {"answer": "7"})
    v = VERIFY(judged, "8")
    assert (v.outcome, v.reward, v.feedback) == ("fail", 0.25, "judged: no")
    dodge = VERIFY(_task(f"{user_module}:dodges"), "x")
    assert (dodge.outcome, dodge.error_class) == ("fail", "reward_function:infra")
    assert "only posttrain reports infrastructure failures" in capsys.readouterr().err
    lopsided = VERIFY(_task(f"{user_module}:lopsided"), "x")  # a fail that would pass the task: refused
    assert (lopsided.outcome, lopsided.reward, lopsided.error_class) == ("fail", 0.0, "reward_function:verdict")
    nearly = VERIFY(_task(f"{user_module}:nearly"), "x")  # a fail within the pass tolerance of 1: refused too
    assert (nearly.outcome, nearly.reward, nearly.error_class) == ("fail", 0.0, "reward_function:verdict")


def verify_as_the_service_does(task, response, tries: int = 3):
    """``VERIFY``, retried on an infra verdict as the execution service retries it: on a loaded host a
    check worker starved of CPU is infra (never the function's failure), and its rerun's verdict stands."""
    for _ in range(tries):
        verdict = VERIFY(task, response)
        if not verdict.is_infra_error:
            return verdict
    return verdict


def test_broken_functions_fail_and_say_so_once(capsys, monkeypatch) -> None:
    from posttrain.envs.function import _domain

    monkeypatch.setattr(_domain, "_told", set())  # what earlier tests (the conformance suite's fixtures) said
    fixtures = DOMAIN.exploit_fixtures()
    verdicts = [verify_as_the_service_does(task, response) for _, task, response in fixtures]
    assert [v.outcome for v in verdicts] == ["fail"] * len(fixtures)
    classes = {name: v.error_class for (name, _, _), v in zip(fixtures, verdicts, strict=True)}
    assert classes["a completion that makes the function raise"] == "reward_function:raised:ValueError"
    assert classes["a completion that makes the function return NaN"] == "reward_function:nan"
    assert classes["a completion that pushes the function out of its range"] == "reward_function:range"
    assert classes["a completion that makes the function backtrack past its budget"] == "reward_function:timeout"
    assert classes["a function that returns text"] == "reward_function:type"
    raised = next(v for v in verdicts if v.error_class == "reward_function:raised:ValueError")
    assert "_broken:parse_int raised ValueError" in raised.feedback and "function-exploit-5" in raised.feedback
    err = capsys.readouterr().err.splitlines()
    VERIFY(fixtures[5][1], "eight")  # the same function and reason again: not repeated
    assert len([line for line in err if "parse_int" in line]) == 1
    assert "parse_int" not in capsys.readouterr().err
    assert all(line.startswith("posttrain: warning: reward function ") and "Traceback" not in line for line in err)


@pytest.mark.parametrize(("record", "field", "says"), [
    ({"reward": "no colon"}, "reward", "package.module:function"),
    ({"reward": "no_such_module_xyz:f"}, "reward", "cannot import no_such_module_xyz"),
    ({"reward": "posttrain.envs.function.examples:nope"}, "reward", "has no 'nope'"),
    ({"reward": "posttrain.envs.function.examples:re"}, "reward", "not a function"),
    ({"reward": [{"function": "posttrain.envs.function.examples:exact_match", "weight": 0}]}, "reward", "weight"),
    ({"reward": [{"function": "posttrain.envs.function.examples:exact_match", "range": [1, 0]}]}, "reward", "range"),
    ({"reward": [{"function": "posttrain.envs.function.examples:exact_match", "typo": 1}]}, "reward", "expected"),
    ({"reward": [], "data": {}}, "reward", "at least one"),
    ({"data": {"prompt": "x"}}, "data", "identifiers"),
    ({"data": ["answer"]}, "data", "an object"),
    ({}, "reward", "in the record or the recipe"),
])
def test_bad_records_name_their_field(record, field, says) -> None:
    base = {"id": "b", "prompt": "p", "data": {"answer": "1"}, "reward": "posttrain.envs.function.examples:exact_match"}
    full = {**base, **record} if record else {k: v for k, v in base.items() if k != "reward"}
    with pytest.raises(TaskError) as e:
        DOMAIN.parse_task(full, "t.jsonl")
    assert f"'{field}'" in str(e.value) and says in str(e.value) and "\n" not in str(e.value)


def test_a_wrong_signature_is_refused_at_parse_time(user_module) -> None:
    for name, says in (("wrong_signature", "expected f(prompt, completion, **data)"), ("NOT_A_FUNCTION", "not a function")):
        with pytest.raises(TaskError) as e:
            _task(f"{user_module}:{name}")
        assert says in str(e.value)


def test_the_recipes_reward_names_the_function_of_records_that_name_none(user_module, tmp_path) -> None:
    from posttrain.train.recipe import Recipe, load_recipe, recipe_tasks

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"q{i}", "domain": "function", "prompt": f"Say {i} apples.",
                                         "data": {"answer": str(i)}, "reference": str(i)}) + "\n" for i in range(6)))
    base = {"stages": ["rl"], "tasks": {"train": [{"file": str(tasks), "n": 4}], "eval": [{"file": str(tasks), "skip": 4}]}}
    for reward in (f"{user_module}:exact", [f"{user_module}:exact"], [{"function": f"{user_module}:exact", "weight": 2}]):
        path = tmp_path / "r.yaml"
        path.write_text(yaml.safe_dump({**base, "reward": reward}))
        recipe = load_recipe(path)
        assert [t.function for t in recipe.reward_functions] == [f"{user_module}:exact"]
        train, held = recipe_tasks(recipe)
        assert [t.fields["reward"][0]["function"] for t in train + held] == [f"{user_module}:exact"] * 6
        assert recipe.reward_weights.outcome == 1.0
    assert Recipe().reward_functions == () and Recipe().reward_weights.format == 0.0
    path.write_text(yaml.safe_dump({**base, "reward": "my_rewards_t:nope"}))
    with pytest.raises(ConfigError) as e:
        load_recipe(path)
    assert "reward" in str(e.value) and "has no 'nope'" in str(e.value) and "\n" not in str(e.value)
    path.write_text(yaml.safe_dump({**base, "reward": {"outcome": 1.0, "format": 0.1}}))  # weights, as before
    with pytest.raises(ConfigError, match="'reward'"):  # and then the records must name their function
        load_recipe(path)


def test_noop_problems_warn_when_a_function_cannot_tell(user_module) -> None:
    always = [_task(f"{user_module}:always", tid=f"a{i}") for i in range(3)]
    lines = noop_problems(always)
    assert any("gives the empty completion full marks on 3 of 3" in line for line in lines)
    assert any("no task it scores has a reference" in line for line in lines)
    fine = [_task("posttrain.envs.function.examples:exact_match", {"answer": "4"}, tid="f", reference="4")]
    assert noop_problems(fine) == []
    with default_reward((RewardTerm(f"{user_module}:exact"),)):
        t = DOMAIN.parse_task({"id": "d", "prompt": "p", "data": {"answer": "1"}}, "t")
    assert t.fields["reward"] == [{"function": f"{user_module}:exact", "weight": 1.0, "range": [0.0, 1.0]}]


@pytest.mark.slow
def test_posttrain_run_and_eval_with_a_reward_function_of_your_own(tmp_path) -> None:
    """TRL's first step: prompts, a reward function in your own file, a recipe that names it."""
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent('''
        def exact(prompt, completion, answer, **data):
            return 1.0 if completion.strip() == answer else 0.0
    '''))
    words = ["apple", "river", "candle", "mountain", "violin", "pepper", "harbor", "lantern", "meadow", "copper",
             "falcon", "tunnel", "orchid", "marble", "saddle", "glacier"]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(
        {"id": f"echo-{w}", "domain": "function", "prompt": f"Repeat the word: {w}", "data": {"answer": w},
         "reference": w}) + "\n" for w in words))
    recipe = {"seed": 0, "stages": ["sft", "rl"], "model": {"name": "embedded", "hidden_size": 32, "num_layers": 1},
              "tasks": {"train": [{"file": "tasks.jsonl", "n": 12}], "eval": [{"file": "tasks.jsonl", "skip": 12}]},
              "sft": {"demonstrations": "references", "epochs": 2, "batch_size": 12},
              "rl": {"steps": 2, "prompts_per_step": 4, "group_size": 2, "max_new_tokens": 8, "checkpoint_every": 2},
              "eval": {"samples_per_task": 1, "max_new_tokens": 8}, "reward": "my_rewards:exact"}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "posttrain.cli", "run", "recipe.yaml", "--out", "run"], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    traj = [json.loads(line) for line in (tmp_path / "run" / "trajectories" / "rl.jsonl").read_text().splitlines()]
    assert {r["domain"] for r in traj} == {"function"} and all(r["outcome"] in ("pass", "fail") for r in traj)
    saved = json.loads((tmp_path / "run" / "tasks" / "eval.jsonl").read_text().splitlines()[0])
    assert saved["reward"][0]["function"] == "my_rewards:exact"  # the saved task names its function itself
    ev = subprocess.run([sys.executable, "-m", "posttrain.cli", "eval", "--run", "run", "--json"], cwd=tmp_path,
                        capture_output=True, text=True, env=env, timeout=600)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert "function" in ev.stdout
