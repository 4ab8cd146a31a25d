"""Preference stages (rm, dpo) score a pair after the very prompt ids its completions were sampled
from: the policy's own ``encode_prompt`` (plain, or the chat template's rendering with ``model.chat``),
of the prompt text the policy was shown (``model_prompt``). Real models (a 1-layer Llama over a
character tokenizer with Qwen's special tokens and a Qwen2-style template), real verifiers."""

import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "policy"))
from _chat_models import qwen_char_tokenizer  # noqa: E402
from test_chat_prompts import tiny_llama_dir  # noqa: E402

from posttrain.cli import main  # noqa: E402
from posttrain.envs import get_domain, model_prompt  # noqa: E402
from posttrain.policy import load_policy  # noqa: E402
from posttrain.train import dpo, rm  # noqa: E402
from posttrain.train.dpo import DPOConfig, PreferencePair, encode_pairs  # noqa: E402
from posttrain.train.preference import pair_from_group, run_dpo, run_rm  # noqa: E402
from posttrain.train.rm import RMConfig  # noqa: E402
from posttrain.types import Rollout, Verdict  # noqa: E402


def chat_ids(tok, prompt: str) -> list[int]:
    """What a chat run samples after: the template over one user message, with the generation prompt."""
    text = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
    return list(tok(text, add_special_tokens=False)["input_ids"])


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> Path:
    return tiny_llama_dir(tmp_path_factory.mktemp("chat") / "model", qwen_char_tokenizer())


def test_encode_pairs_takes_the_policys_prompt_encoding(chat_model):
    tok = qwen_char_tokenizer()
    pair = PreferencePair("2+2?", "4", "5")
    [chat] = encode_pairs(tok, [pair], max_len=512, encode_prompt=load_policy(chat_model, chat=True).encode_prompt)
    assert list(chat.prompt_ids) == chat_ids(tok, "2+2?") and len(chat.prompt_ids) > 20  # system turn, markers
    assert list(chat.chosen_ids) == [*tok("4", add_special_tokens=False)["input_ids"], tok.eos_token_id]
    assert list(chat.rejected_ids) == [*tok("5", add_special_tokens=False)["input_ids"], tok.eos_token_id]
    [plain] = encode_pairs(tok, [pair], max_len=512)  # no encoder: the text's own ids (TRL's), as before
    assert list(plain.prompt_ids) == list(tok("2+2?", add_special_tokens=False)["input_ids"])
    with pytest.raises(Exception, match="max_len=30"):  # the rendered prompt is what counts against max_len
        encode_pairs(tok, [pair], max_len=30, encode_prompt=load_policy(chat_model, chat=True).encode_prompt)


def _watch(monkeypatch, module, name: str) -> list[tuple[int, ...]]:
    """Record the rows (prompt + chosen, prompt + rejected ids) of every pair ``module.name(model, pairs,
    pad_id, ...)`` scores; the real function still does the scoring."""
    rows: list[tuple[int, ...]] = []
    real = getattr(module, name)

    def watched(model, pairs, pad_id, **kwargs):
        rows.extend(row for p in pairs for row in ((*p.prompt_ids, *p.chosen_ids), (*p.prompt_ids, *p.rejected_ids)))
        return real(model, pairs, pad_id, **kwargs)

    monkeypatch.setattr(module, name, watched)
    return rows


def test_run_dpo_and_run_rm_score_the_prompt_ids_the_policy_samples_after(chat_model, tmp_path, monkeypatch):
    """The pipeline's dpo and rm stages hand the policy's ``encode_prompt`` down: the rows the losses
    score are the chat-rendered prompt + the response ids + EOS (a plain encoding would be 4 tokens)."""
    policy = load_policy(chat_model, chat=True)
    tok = policy.tokenizer
    pair = PreferencePair("2+2?", "4", "5")
    want = {(*chat_ids(tok, "2+2?"), *tok(r, add_special_tokens=False)["input_ids"], tok.eos_token_id) for r in "45"}
    dpo_rows, rm_rows = _watch(monkeypatch, dpo, "sequence_logps"), _watch(monkeypatch, rm, "_pair_scores")
    run_dpo(policy, [pair], DPOConfig(epochs=1, batch_size=1, micro_batch_size=1), log=lambda _: None)
    assert len(dpo_rows) == 4 and set(dpo_rows) == want  # the reference pass, then the policy's
    run_rm(chat_model, policy, [pair], RMConfig(epochs=1, batch_size=1), tmp_path / "rm", log=lambda _: None)
    assert len(rm_rows) == 2 and set(rm_rows) == want


def test_a_pair_keeps_the_prompt_the_policy_was_shown():
    """A tool task's prompt as the model sees it carries the tool schemas (``model_prompt``); a pair built
    on ``task.prompt`` alone would be scored after another prompt than the one sampled from."""
    [task] = get_domain("tool").generate_tasks(1, seed=0)
    assert model_prompt(task) != task.prompt
    bad = Rollout(task.id, 0, (), (), (), "no call", "stop", Verdict(outcome="fail", reward=0.0))
    pair = pair_from_group(task, [bad])
    assert pair is not None and pair.prompt == model_prompt(task)


@pytest.mark.slow
def test_a_chat_run_with_rm_and_dpo_scores_pairs_on_the_chat_rendered_prompts(chat_model, tmp_path, monkeypatch):
    """``posttrain run`` with rm and dpo on ``model.chat: true`` (refused at parse time before): the pairs
    the reward model and DPO score are ``apply_chat_template([user prompt], add_generation_prompt=True)``
    + the response's ids + EOS, where the policy sampled them from."""
    tok = qwen_char_tokenizer()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"m{i}", "domain": "math", "prompt": f"{i}+1?", "answer": str(i + 1),
                                         "reference": f"\\boxed{{{i + 1}}}"}) + "\n" for i in range(6)))
    recipe = tmp_path / "pairs.yaml"
    recipe.write_text(yaml.safe_dump({
        "stages": ["rm", "dpo"], "model": {"name": str(chat_model), "chat": True},
        "tasks": {"train": [{"file": str(tasks), "n": 4}], "eval": [{"file": str(tasks), "skip": 4}]},
        "pairs": {"samples_per_task": 2, "max_new_tokens": 4},
        "rm": {"epochs": 1, "batch_size": 4}, "dpo": {"epochs": 1, "batch_size": 4},
        "eval": {"samples_per_task": 1, "max_new_tokens": 4}}))
    dpo_rows, rm_rows = _watch(monkeypatch, dpo, "sequence_logps"), _watch(monkeypatch, rm, "_pair_scores")
    out = tmp_path / "run"
    assert main(["run", str(recipe), "--out", str(out)]) == 0
    eos = tok.eos_token_id
    prompts = {f"{i}+1?": chat_ids(tok, f"{i}+1?") for i in range(4)}
    chosen = {tuple(ids) + tuple(tok(f"\\boxed{{{i + 1}}}", add_special_tokens=False)["input_ids"]) + (eos,)
              for i, ids in enumerate(prompts.values())}
    for rows in (rm_rows, dpo_rows):
        assert rows and len(rows) % 2 == 0
        for row in rows:  # every row: a chat-rendered training prompt, then a response ending with EOS
            assert any(row[:len(p)] == tuple(p) and len(row) > len(p) for p in prompts.values()), row
            assert row[-1] == eos
        assert set(rows[0::2]) <= chosen  # the random model passes nothing: the reference is chosen
    sampled = [json.loads(x) for x in (out / "eval" / "dpo.jsonl").read_text().splitlines()]
    assert [r["prompt_ids"] for r in sampled] == [chat_ids(tok, "4+1?"), chat_ids(tok, "5+1?")]
    assert json.loads((out / "checkpoints" / "dpo" / "posttrain.json").read_text()) == {"chat": True}
