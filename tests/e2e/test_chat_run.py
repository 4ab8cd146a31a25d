"""``model.chat`` end to end: a run on a model whose tokenizer has a Qwen-style chat template trains
and evaluates on chat-rendered prompts, its checkpoints remember it, and ``posttrain eval`` of a
checkpoint uses what it was trained with unless told otherwise (``--no-chat``). Real model
(a 1-layer Llama over a character tokenizer with Qwen's special tokens), sandbox and verifiers."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from run_logs import here

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "policy"))
from _chat_models import qwen_char_tokenizer  # noqa: E402
from test_chat_prompts import tiny_llama_dir  # noqa: E402


def cli(*args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "posttrain.cli", *args], capture_output=True, text=True, timeout=300,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_chat_run_trains_evaluates_and_remembers_chat_prompts(tmp_path, capsys):
    tok = qwen_char_tokenizer()
    model = tiny_llama_dir(tmp_path / "model", tok)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"m{i}", "domain": "math", "prompt": f"{i}+1?", "answer": str(i + 1),
                                         "reference": f"\\boxed{{{i + 1}}}"}) + "\n" for i in range(6)))
    recipe = tmp_path / "chat.yaml"
    recipe.write_text(yaml.safe_dump({
        "stages": ["sft"], "model": {"name": str(model)},  # model.chat: auto, the default
        "tasks": {"train": [{"file": str(tasks), "n": 4}], "eval": [{"file": str(tasks), "skip": 4}]},
        "sft": {"demonstrations": "references", "epochs": 1, "batch_size": 4},
        "eval": {"samples_per_task": 1, "max_new_tokens": 4}}))
    out = tmp_path / "run"
    cli("run", str(recipe), "--out", str(out))

    def chat_ids(prompt: str) -> list[int]:
        text = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
        return list(tok(text, add_special_tokens=False)["input_ids"])

    for stage in ("base", "sft"):
        assert json.loads((out / "checkpoints" / stage / "posttrain.json").read_text()) == {"chat": True}
        evaluated = records(out / "eval" / f"{stage}.jsonl")
        assert [r["prompt_ids"] for r in evaluated] == [chat_ids("4+1?"), chat_ids("5+1?")]
    # posttrain eval of the checkpoint: as trained (chat), or plain when told
    ckpt = str(out / "checkpoints" / "sft")
    common = ["eval", "--model", ckpt, "--tasks", str(tasks), "--limit", "2", "--max-new-tokens", "4", "--json"]
    for extra in (["--out", str(tmp_path / "as-trained")], ["--no-chat", "--out", str(tmp_path / "plain")]):
        p = here(capsys, *common, *extra)  # after the run's subprocess: in this process
        assert p.returncode == 0, p.stderr[-3000:]
    assert [r["prompt_ids"] for r in records(tmp_path / "as-trained" / "records.jsonl")] == \
        [chat_ids("0+1?"), chat_ids("1+1?")]
    assert [r["prompt_ids"] for r in records(tmp_path / "plain" / "records.jsonl")] == \
        [list(tok("0+1?")["input_ids"]), list(tok("1+1?")["input_ids"])]
