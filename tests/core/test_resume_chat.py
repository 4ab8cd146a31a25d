"""``--resume`` keeps the prompts a run was started with (``model.chat``): the base checkpoint's
record (posttrain.json) says how they were rendered; a run made before the record existed ran on
plain prompts and resumes on them, though ``model.chat: auto`` would now render the model's chat
template; a recipe that resolves otherwise than the record is one line, exit 2, before any work.
Real model directories (a 1-layer Llama over a character tokenizer with a Qwen2-style template)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main
from posttrain.cli.pipeline import DONE, prepare_run_dir
from posttrain.policy import CHAT_RECORD, load_policy
from posttrain.train.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "policy"))
from _chat_models import qwen_char_tokenizer  # noqa: E402
from test_chat_prompts import tiny_llama_dir  # noqa: E402


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> Path:
    return tiny_llama_dir(tmp_path_factory.mktemp("chat") / "model", qwen_char_tokenizer())


@pytest.fixture
def ws(tmp_path, monkeypatch, chat_model):
    monkeypatch.chdir(tmp_path)
    Path("tasks.jsonl").write_text("".join(json.dumps(
        {"id": f"m{i}", "domain": "math", "prompt": f"{i}+1?", "answer": str(i + 1), "reference": f"\\boxed{{{i + 1}}}"})
        + "\n" for i in range(4)))
    Path("r.yaml").write_text(yaml.safe_dump({
        "stages": ["sft"], "model": {"name": str(chat_model)},  # model.chat: auto, the default
        "tasks": {"train": [{"file": "tasks.jsonl", "n": 2}], "eval": [{"file": "tasks.jsonl", "skip": 2}]},
        "sft": {"demonstrations": "references", "epochs": 1, "batch_size": 2},
        "eval": {"samples_per_task": 1, "max_new_tokens": 4}}))
    return tmp_path


def started(out: Path, *, chat: bool | None, config_chat: bool = False) -> None:
    """A run in ``out`` stopped after its base checkpoint: ``chat`` is the base's record (None: none, as
    posttrain wrote before model.chat existed, and then no model.chat in config.yaml unless
    ``config_chat``)."""
    recipe = load_recipe("r.yaml", [] if chat is None else [f"model.chat={str(chat).lower()}"])
    prepare_run_dir(out, recipe, resume=False)
    if chat is None and not config_chat:
        saved = yaml.safe_load((out / "config.yaml").read_text())
        del saved["model"]["chat"]
        (out / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    base = out / "checkpoints" / "base"
    load_policy(recipe.model.name, chat=bool(chat)).save(base)  # what build_base writes
    if chat is None:
        (base / CHAT_RECORD).unlink()
    (base / DONE).write_text("ok\n")


def test_a_run_that_predates_model_chat_resumes_on_plain_prompts(ws, capsys):
    started(ws / "out", chat=None)
    tok = qwen_char_tokenizer()
    assert load_recipe("r.yaml").model.chat_setting == "auto" and tok.chat_template  # auto would switch it
    assert main(["run", "r.yaml", "--out", "out", "--resume"]) == 0
    for stage in ("base", "sft"):  # evaluated, and the sft stage trained, on the prompts it started with
        records = [json.loads(x) for x in (ws / "out" / "eval" / f"{stage}.jsonl").read_text().splitlines()]
        assert [r["prompt_ids"] for r in records] == [tok("2+1?")["input_ids"], tok("3+1?")["input_ids"]]
    assert "resuming on plain prompts, as the run was started" in capsys.readouterr().err  # and says so
    assert json.loads((ws / "out" / "checkpoints" / "sft" / CHAT_RECORD).read_text()) == {"chat": False}
    assert not (ws / "out" / "checkpoints" / "base" / CHAT_RECORD).exists()  # the base is left as it was


@pytest.mark.parametrize(("record", "sets", "was", "now"), [
    (True, ["model.chat=false"], f"chat-rendered prompts (out/checkpoints/base/{CHAT_RECORD})",
     "plain prompts (model.chat: false); --resume keeps a run's prompts: set model.chat: true"),
    (False, ["model.chat=true"], f"plain prompts (out/checkpoints/base/{CHAT_RECORD})",
     "chat-rendered prompts (model.chat: true)"),
    (False, [], f"plain prompts (out/checkpoints/base/{CHAT_RECORD})", "chat-rendered prompts (model.chat: auto)"),
    (None, ["model.chat=true"], f"plain prompts (out/checkpoints/base has no {CHAT_RECORD}: it predates model.chat)",
     "chat-rendered prompts (model.chat: true)"),
])
def test_a_recipe_that_renders_otherwise_than_the_run_exits_2_in_one_line(ws, capsys, record, sets, was, now):
    started(ws / "out", chat=record, config_chat=True)
    if record is False:  # as a run whose config.yaml says auto, resolved plain then (another template, another rule)
        saved = yaml.safe_load(Path("out/config.yaml").read_text())
        saved["model"]["chat"] = "auto"
        Path("out/config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    before = sorted(str(p) for p in Path("out").rglob("*"))
    code = main(["run", "r.yaml", "--out", "out", "--resume", *[x for s in sets for x in ("--set", s)]])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"model.chat: out was started with {was}, the recipe now gives {now}" in err, err
    assert sorted(str(p) for p in Path("out").rglob("*")) == before  # no work


def test_the_recorded_value_given_explicitly_resumes(ws):
    """model.chat is judged by the run's record, not by config.yaml's text: giving the value the run
    was started with resumes (auto -> true here), and so does false on a run with no record."""
    started(ws / "out", chat=True)
    saved = yaml.safe_load(Path("out/config.yaml").read_text())
    saved["model"]["chat"] = "auto"
    Path("out/config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    assert prepare_run_dir(Path("out"), load_recipe("r.yaml", ["model.chat=true"]), resume=True).model.chat is True
    assert prepare_run_dir(Path("out"), load_recipe("r.yaml"), resume=True).model.chat is True
    with pytest.raises(Exception, match=r"changed: eval\.max_new_tokens"):  # other keys: as before
        prepare_run_dir(Path("out"), load_recipe("r.yaml", ["eval.max_new_tokens=5"]), resume=True)
    shutil.rmtree("out")
    started(ws / "out", chat=None)
    assert prepare_run_dir(Path("out"), load_recipe("r.yaml", ["model.chat=false"]), resume=True).model.chat is False


def test_auto_resolving_otherwise_than_the_record_names_it(tmp_path, capsys):
    """The embedded default under auto was chat-rendered for a while (its template renders the same
    prompts); such a run's record says chat, auto now gives plain: refused, and the recorded value resumes."""
    from posttrain.cli.pipeline import build_base

    auto = load_recipe(str(ROOT / "configs" / "tiny-grpo.yaml"))
    assert auto.model.name == "embedded" and auto.model.chat == "auto" and auto.model.chat_setting is False
    out = tmp_path / "out"
    prepare_run_dir(out, auto, resume=False)
    build_base(load_recipe(str(ROOT / "configs" / "tiny-grpo.yaml"), ["model.chat=true"]), out / "checkpoints" / "base")
    (out / "checkpoints" / "base" / DONE).write_text("ok\n")
    code = main(["run", str(ROOT / "configs" / "tiny-grpo.yaml"), "--out", str(out), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert (f"model.chat: {out} was started with chat-rendered prompts ({out}/checkpoints/base/{CHAT_RECORD}), the "
            f"recipe now gives plain prompts (model.chat: auto); --resume keeps a run's prompts: set model.chat: true"
            ) in err, err
    resumed = prepare_run_dir(out, load_recipe(str(ROOT / "configs" / "tiny-grpo.yaml"), ["model.chat=true"]),
                              resume=True)
    assert resumed.model.chat is True


def test_a_run_whose_stages_were_trained_on_both_renderings_is_refused(ws, capsys):
    """A run started before model.chat (plain) whose sft stage a resume then trained on chat-rendered
    prompts (what resuming it did until now): its checkpoints disagree; refused, naming both."""
    started(ws / "out", chat=None)
    sft = ws / "out" / "checkpoints" / "sft"
    load_policy(load_recipe("r.yaml").model.name, chat=True).save(sft)
    (sft / DONE).write_text("ok\n")
    capsys.readouterr()  # the setup's own output (transformers' loading bars, unless an earlier test hid them)
    code = main(["run", "r.yaml", "--out", "out", "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert (f"model.chat: out was started with plain prompts (out/checkpoints/base has no {CHAT_RECORD}: it predates "
            f"model.chat), but out/checkpoints/sft/{CHAT_RECORD} records chat-rendered prompts") in err, err


def test_a_run_on_a_template_auto_cannot_use_resumes_under_auto(ws, capsys, tmp_path_factory):
    """A run started before model.chat on a base model whose template ends turns with another token
    than its EOS (Qwen2.5 base): its unchanged recipe (auto) parses, resumes on plain prompts and
    records them (the parse-time check refused auto there, before the resume logic)."""
    tok = qwen_char_tokenizer()
    tok.eos_token = "<|endoftext|>"
    base_model = tiny_llama_dir(tmp_path_factory.mktemp("base") / "model", tok)
    saved = yaml.safe_load(Path("r.yaml").read_text())
    saved["model"]["name"] = str(base_model)
    Path("r.yaml").write_text(yaml.safe_dump(saved))
    started(ws / "out", chat=None)
    assert main(["run", "r.yaml", "--out", "out", "--resume"]) == 0, capsys.readouterr().err
    records = [json.loads(x) for x in (ws / "out" / "eval" / "sft.jsonl").read_text().splitlines()]
    assert [r["prompt_ids"] for r in records] == [tok("2+1?")["input_ids"], tok("3+1?")["input_ids"]]
    assert json.loads((ws / "out" / "checkpoints" / "sft" / CHAT_RECORD).read_text()) == {"chat": False}


def test_resume_where_no_run_began_says_it_starts_one(ws, capsys):
    """``--resume`` into a directory no run began in (a first launch of a job script that always passes
    it, or a mistyped --out) starts the run and says so; it printed "resumed at stage base step 0"."""
    assert main(["run", "r.yaml", "--out", "typo", "--resume"]) == 0
    said = capsys.readouterr()
    assert "--resume: no run in typo to resume; starting one there" in said.out + said.err
    assert "resumed at stage" not in said.out + said.err
    assert (ws / "typo" / "summary.json").exists()
