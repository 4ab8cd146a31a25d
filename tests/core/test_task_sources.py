"""A recipe's task sources, SFT demonstrations and model, checked when the recipe is parsed.

The table runs ``posttrain run`` in-process on a small recipe with one thing wrong per case: exit
2, one line naming the recipe key and the file/record (or the model path and what is missing), no
traceback, and nothing created (the run never starts). The rest checks what the sources load.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main
from posttrain.envs import task_to_record
from posttrain.errors import ConfigError, UserError
from posttrain.tasks import TaskSource, load_pools
from posttrain.train.recipe import EMBEDDED_RECIPE, load_recipe, recipe_tasks

ROOT = Path(__file__).resolve().parents[2]


def _math(tid: str, *, reference: bool = True) -> dict:
    rec = {"id": tid, "domain": "math", "prompt": f"{tid}: 1+1?", "answer": "2"}
    return {**rec, "reference": "\\boxed{2}"} if reference else rec


def _jsonl(path: Path, records: list) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))


def _gpt2_dir(path: Path, *, positions: int = 256, tokenizer: bool = True, eos: bool = True) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    from posttrain.policy import build_char_tokenizer

    GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=128, n_positions=positions)
                    ).save_pretrained(path)
    if tokenizer:
        build_char_tokenizer().save_pretrained(path)
    if not eos:
        cfg = json.loads((path / "tokenizer_config.json").read_text())
        del cfg["eos_token"]
        (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    return path


RECIPE = {
    "stages": ["sft", "rl"],
    "model": {"name": "embedded"},  # tests switch model.name: no embedded sizes (issue 26: refused for another model)
    "tasks": {"train": [{"file": "train.jsonl"}], "eval": [{"file": "eval.jsonl"}]},
    "sft": {"demonstrations": "references"},
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("models")
    _gpt2_dir(d / "no-tokenizer", tokenizer=False)
    _gpt2_dir(d / "no-eos", eos=False)
    _gpt2_dir(d / "short", positions=16)
    _gpt2_dir(d / "good")
    return d


@pytest.fixture
def ws(tmp_path, monkeypatch, models):
    w = tmp_path / "ws"
    w.mkdir()
    _jsonl(w / "train.jsonl", [_math("m1"), _math("m2")])
    _jsonl(w / "eval.jsonl", [_math("e1")])
    _jsonl(w / "noref.jsonl", [_math("n1", reference=False)])
    _jsonl(w / "notjson.jsonl", ["{not json"])
    _jsonl(w / "schema.jsonl", [_math("m1"), {"id": "b2", "domain": "math", "prompt": "p"}])
    _jsonl(w / "dup.jsonl", [_math("m3"), _math("m1")])
    _jsonl(w / "chess.jsonl", [{"id": "c1", "domain": "chess", "prompt": "e4?"}])
    _jsonl(w / "he.jsonl", [{"task_id": "HumanEval/0", "prompt": "def f():\n", "entry_point": "f",
                             "canonical_solution": "    return 1\n", "test": "def check(c):\n    assert c() == 1\n"}])
    _jsonl(w / "demo-eval.jsonl", [{"task_id": "e1", "response": "\\boxed{2}"}])
    _jsonl(w / "demo-unknown.jsonl", [{"task_id": "zz", "response": "\\boxed{2}"}])
    _jsonl(w / "demo-keys.jsonl", [{"prompt": "p", "answer": "\\boxed{2}"}])
    _jsonl(w / "demo-leak.jsonl", [{"prompt": "e1: 1+1?", "response": "\\boxed{2}"}])
    (w / "r.yaml").write_text(yaml.safe_dump(RECIPE))
    monkeypatch.chdir(w)
    return w


def _snapshot(root: Path) -> dict[str, str | None]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


S = "--set"
CASES = [
    # task files
    ([S, "tasks.train=[{file: missing.jsonl}]"], "r.yaml: tasks.train[0]: file: no such task file missing.jsonl"),
    ([S, "tasks.eval=[{file: nope/e.jsonl}]"], "tasks.eval[0]: file: no such task file nope/e.jsonl"),
    ([S, "tasks.train=[{file: notjson.jsonl}]"], "tasks.train[0]: notjson.jsonl:1:"),
    ([S, "tasks.train=[{file: schema.jsonl}]"], "tasks.train[0]: schema.jsonl:2: task 'b2': field 'answer'"),
    ([S, "tasks.train=[{file: chess.jsonl}]"], "tasks.train[0]: chess.jsonl:1: unknown domain 'chess'"),
    ([S, "tasks.train=[{file: he.jsonl}]"], "tasks.train[0]: he.jsonl:1: task 'HumanEval/0': field 'domain'"),
    ([S, "tasks.train=[{file: he.jsonl, domain: chess}]"], "tasks.train[0]: domain: unknown domain 'chess'"),
    ([S, "tasks.train=[{file: train.jsonl, n: 5}]"], "tasks.train[0]: n: 5 tasks asked, file train.jsonl has 2"),
    ([S, "tasks.train=[{file: train.jsonl, skip: 2}]"], "tasks.train[0]: skip: 2 leaves no task"),
    # generators
    ([S, "tasks.train=[{generator: chess, n: 3}]"], "tasks.train[0]: generator: unknown generator 'chess'"),
    ([S, "tasks.train=[{generator: json}]"], "tasks.train[0]: n: the json generator needs n"),
    ([S, "tasks.train=[{generator: json, n: 2, domain: json}]"], "tasks.train[0]: domain: only a task file"),
    ([S, "tasks.train=[{file: train.jsonl, generator: math}]"], "tasks.train[0]: expected exactly one of 'file'"),
    # splits
    ([S, "tasks.eval=[{file: train.jsonl, n: 1}]"],
     "tasks.eval[0]: task 'm1' (train.jsonl:1) is also a training task, in tasks.train[0] (train.jsonl:1)"),
    ([S, "tasks.train=[{file: train.jsonl}, {file: dup.jsonl}]"],
     "tasks.train[1]: task 'm1' (dup.jsonl:2) is already in tasks.train[0] (train.jsonl:1)"),
    ([S, "tasks.eval=[]"], "tasks.eval: expected at least one task source"),
    ([S, "tasks.domains=[math]"], "tasks.domains: the shorthand is not used with tasks.train/tasks.eval"),
    # demonstrations
    ([S, "sft.demonstrations=demonstrator"], "sft.demonstrations: the scripted demonstrator knows only the quickstart"),
    ([S, "tasks.train=[{file: noref.jsonl}]"], "sft.demonstrations: references, but training task 'n1' has no reference"),
    ([S, "sft.demonstrations=nodemos.jsonl"], "sft.demonstrations: no such demonstrations file nodemos.jsonl"),
    ([S, "sft.demonstrations=demo-eval.jsonl"], "sft.demonstrations: demo-eval.jsonl:1: task_id 'e1' is an evaluation"),
    ([S, "sft.demonstrations=demo-unknown.jsonl"], "demo-unknown.jsonl:1: task_id 'zz' is not a training task"),
    ([S, "sft.demonstrations=demo-keys.jsonl"], "demo-keys.jsonl:1: field 'response': expected a string"),
    ([S, "sft.demonstrations=demo-leak.jsonl"], "demo-leak.jsonl:1: the prompt is that of evaluation task 'e1'"),
    # the model
    ([S, "model.name={models}/no-tokenizer"], "model.name: {models}/no-tokenizer: the model directory has no tokenizer"),
    ([S, "model.name={models}/no-eos"], "model.name: {models}/no-eos: the tokenizer has no EOS token"),
    ([S, "model.name={models}/short"],
     "model.name: {models}/short/config.json n_positions: the model has 16 positions, the recipe needs 33"),
    ([S, "model.max_positions=18", S, "rl.max_new_tokens=4", S, "eval.max_new_tokens=4"],  # 1 + 17 chars + EOS
     "model.max_positions: the model has 18 positions, the recipe needs 19: the longest SFT demonstration"),
    ([S, "model.max_positions=20", S, "stages=[rl]", S, "rl.max_new_tokens=30"],  # BOS + 8 chars + 30
     "model.max_positions: the model has 20 positions, the recipe needs 39: the longest prompt ('m1: 1+1?') is 9 "
     "tokens + rl.max_new_tokens 30"),
]


@pytest.mark.parametrize(("extra", "needle"), CASES, ids=[c[1][:40] for c in CASES])
def test_a_bad_recipe_exits_2_before_any_work(ws, models, capsys, extra, needle):
    extra, needle = [e.replace("{models}", str(models)) for e in extra], needle.replace("{models}", str(models))
    before = _snapshot(ws)
    code = main(["run", "r.yaml", "--out", "out", *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert needle in err, err
    assert _snapshot(ws) == before


def test_the_good_recipe_and_a_good_model_directory_parse(ws, models):
    r = load_recipe("r.yaml")
    train, held = recipe_tasks(r)
    assert [t.id for t in train] == ["m1", "m2"] and [t.id for t in held] == ["e1"]
    load_recipe("r.yaml", [f"model.name={models}/good"])


def test_a_held_out_task_with_a_training_prompt_is_refused_or_with_contamination_keep_a_warning(ws, capsys):
    _jsonl(ws / "eval2.jsonl", [{**_math("e2"), "prompt": "m2: 1+1?"}, _math("e3")])
    with pytest.raises(ConfigError, match=r"tasks: 1 of 2 evaluation tasks overlap a training task \(e.g. eval 'e2'"):
        load_recipe("r.yaml", ["tasks.eval=[{file: eval2.jsonl}]"])
    load_recipe("r.yaml", ["tasks.eval=[{file: eval2.jsonl}]", "tasks.contamination=keep"])
    err = capsys.readouterr().err
    assert err == ("posttrain: warning: 1 of 2 held-out task(s) have the prompt of a training task ('e2' = 'm2'); "
                   "their pass@1 measures recall, not generalization\n")
    load_recipe("r.yaml")
    assert capsys.readouterr().err == ""


def test_a_saved_run_config_loads_again(ws):
    """RUN/config.yaml holds the shorthand's defaults beside the sources: it parses back to the same recipe."""
    from posttrain.config import to_dict

    recipe = load_recipe("r.yaml")
    Path("saved.yaml").write_text(yaml.safe_dump(to_dict(recipe), sort_keys=False))
    assert load_recipe("saved.yaml") == recipe


def test_the_shorthand_gives_the_same_pools_as_before():
    """The quickstart's ``tasks.domains`` form: the same tasks, in the same order, as before sources existed."""
    def digest(tasks):
        return hashlib.sha256(json.dumps([task_to_record(t) for t in tasks]).encode()).hexdigest()[:16]

    for recipe, want in ((EMBEDDED_RECIPE, ("f03c1d4b82fe92ee", "e0eb5e3f24c58ab9")),
                         (ROOT / "configs" / "tiny-grpo.yaml", ("95fa81957d530011", "5329212f546283a8"))):
        train, held = recipe_tasks(load_recipe(recipe))
        assert (digest(train), digest(held)) == want, recipe


def test_sources_of_every_kind(tmp_path):
    from posttrain.envs import DOMAINS, get_domain

    mixed = tmp_path / "mixed.json"  # a JSON list of records of every domain
    mixed.write_text(json.dumps([task_to_record(get_domain(d).generate_tasks(2, seed=5)[1]) for d in DOMAINS]))
    he = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(he, "wt") as f:
        f.write(json.dumps({"task_id": "HumanEval/7", "prompt": "def f():\n", "entry_point": "f",
                            "canonical_solution": "    return 1\n", "test": "def check(c):\n    assert c() == 1\n"}) + "\n")
    train, held = load_pools(
        [TaskSource(file=str(mixed)), TaskSource(file=str(he), domain="code"), TaskSource(generator="tool", n=3),
         TaskSource(generator="quickstart-code", n=4)],
        [TaskSource(generator="tool", n=2, skip=3), TaskSource(generator="json", n=2, seed=9)], seed=1)
    d = len(DOMAINS)
    assert [t.domain for t in train[:d + 1]] == [*DOMAINS, "code"]
    assert train[d].id == "HumanEval/7" and train[d].reference == "    return 1\n"
    assert [t.id for t in train[d + 1:d + 4]] == [f"tool-gen-1-{i}" for i in range(3)]
    assert [t.id for t in held] == ["tool-gen-1-3", "tool-gen-1-4", "json-gen-9-0", "json-gen-9-1"]
    assert all(t.id.startswith("qs-code-") for t in train[d + 4:])
    # a domain generator's skip/n slice is that of one longer run
    assert [t.id for t in get_domain("tool").generate_tasks(5, seed=1)] == [t.id for t in train[d + 1:d + 4] + held[:2]]


def test_a_changed_file_is_read_again(tmp_path):
    path = tmp_path / "t.jsonl"
    _jsonl(path, [_math("a")])
    src = [TaskSource(file=str(path))]
    ev = [TaskSource(generator="math", n=1)]
    assert [t.id for t in load_pools(src, ev, seed=0)[0]] == ["a"]
    _jsonl(path, [_math("a"), _math("b")])
    assert [t.id for t in load_pools(src, ev, seed=0)[0]] == ["a", "b"]


def test_load_policy_refuses_a_model_without_tokenizer_or_eos(models):
    from posttrain.policy import load_policy

    with pytest.raises(UserError, match="no-tokenizer: the model directory has no tokenizer"):
        load_policy(models / "no-tokenizer")
    with pytest.raises(UserError, match="no-eos: the tokenizer has no EOS token"):
        load_policy(models / "no-eos")
    assert load_policy(models / "good").eos_token_id is not None


def test_a_recipe_built_in_code_is_checked_before_the_run_directory(tmp_path):
    """``run_recipe`` checks what ``load_recipe`` checks, for a ``Recipe`` made without a file."""
    from posttrain.cli.pipeline import run_recipe
    from posttrain.train.recipe import Recipe, TasksConfig

    recipe = Recipe(tasks=TasksConfig(train=(TaskSource(file=str(tmp_path / "none.jsonl")),),
                                      eval=(TaskSource(generator="math", n=2),)))
    with pytest.raises(ConfigError, match=r"tasks.train\[0\]: file: no such task file"):
        run_recipe(recipe, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_docstring_examples():
    import doctest

    import posttrain.tasks._sources

    assert doctest.testmod(posttrain.tasks._sources).failed == 0


@pytest.mark.parametrize("name", ["own-tasks.yaml", "own-tasks-demos.yaml"])
def test_the_own_tasks_recipes_parse(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # their paths are relative to the repository
    train, held = recipe_tasks(load_recipe(ROOT / "configs" / name))
    assert any(t.id.startswith("MyEval/") for t in train) and any(t.id.startswith("MyEval/") for t in held)
