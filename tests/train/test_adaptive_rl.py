"""The per-task temperature and token budget in RL (``rl.adaptive_temperature``, ``rl.adaptive_budget``):

- the loss scores each row at the temperature it was sampled at: a batch of two temperatures gives
  the loss and gradient of its halves, each at its own scalar temperature (and so does the stale-batch
  correction's recomputed logprobs);
- the real sampler through ``sample_groups``: a task whose group repeated itself is sampled at a
  higher temperature next time, each episode carrying the temperature it was sampled at;
- ``train_grpo`` with both on trains and logs ``adaptive/*``; a resumed run (a batch in flight) ends
  bit-identical to an uninterrupted one;
- a bad value is one ``ConfigError`` line naming ``rl.adaptive_*.<field>``.

The tiny Llama is random, nearly uniform over its characters: at temperature 0.1 and 2 new tokens
its groups sometimes repeat themselves, and the verifier (first character's code point even) gives
groups reward variance.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algo"))
from _tiny import make_model, make_tokenizer  # noqa: E402

from posttrain.algo import count_items  # noqa: E402
from posttrain.errors import ConfigError  # noqa: E402
from posttrain.policy import EmbeddedModelSpec, build_embedded_default, load_policy  # noqa: E402
from posttrain.rollout import diversity  # noqa: E402
from posttrain.rollout._adaptive import completion_ids  # noqa: E402
from posttrain.sched import DomainHooks, LocalBackend, Service  # noqa: E402
from posttrain.tasks import TaskSampler  # noqa: E402
from posttrain.train._logprobs import token_logprobs  # noqa: E402
from posttrain.train._overlap import correct_staleness  # noqa: E402
from posttrain.train._step import LossSpec, PolicyBatch, policy_loss, policy_update  # noqa: E402
from posttrain.train.checkpoint import load_latest  # noqa: E402
from posttrain.train.grpo import adaptive_sampling, sample_groups, train_grpo  # noqa: E402
from posttrain.train.recipe import (  # noqa: E402
    EMBEDDED_RECIPE,
    AdaptiveBudgetConfig,
    AdaptiveTemperatureConfig,
    RLConfig,
    load_recipe,
)
from posttrain.types import Task, Verdict  # noqa: E402
from posttrain.verify.rewards import RewardWeights  # noqa: E402

TASKS = [Task(id=f"m{i}", domain="math", prompt=f"{i}+{i % 7}=", fields={"answer": str(i + i % 7)}) for i in range(4)]
TIMINGS = {"wall_s", "step_s", "tokens_per_s", "gen_s", "gen_idle_s", "train_idle_s"}
BASE_T = 0.1


def first_even(task: Task, response: str) -> Verdict:
    ok = bool(response) and ord(response[0]) % 2 == 0
    return Verdict("pass" if ok else "fail", float(ok))


def adaptive_cfg(**kw) -> RLConfig:
    return RLConfig(**{"steps": 4, "prompts_per_step": 4, "group_size": 4, "temperature": BASE_T, "max_new_tokens": 2,
                       "lr": 1e-2, "checkpoint_every": 2,
                       "adaptive_temperature": AdaptiveTemperatureConfig(high=0.8, target_dup=0.0, step=2.0),
                       "adaptive_budget": AdaptiveBudgetConfig(low=1, high=6, margin=1.0), **kw})


# -- the loss: each row at its own temperature ---------------------------------------------------------

def _two_temperature_batch(tok):
    """4 groups x 2 completions, right-padded, groups sharing their prompt (the shared-prefix path);
    groups 0-1 sampled at 0.7, groups 2-3 at 1.3."""
    gen = torch.Generator().manual_seed(0)
    rows, masks = [], []
    for _ in range(4):
        prompt = torch.randint(4, len(tok), (int(torch.randint(5, 10, (1,), generator=gen)),), generator=gen).tolist()
        for _ in range(2):
            comp = torch.randint(4, len(tok), (int(torch.randint(2, 7, (1,), generator=gen)),), generator=gen).tolist()
            rows.append(prompt + comp)
            masks.append([0.0] * len(prompt) + [1.0] * len(comp))
    width = max(map(len, rows))
    ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
    attn = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([m + [0.0] * (width - len(m)) for m in masks], dtype=torch.float64)
    old = -1.5 * mask + 0.1 * torch.randn(mask.shape, generator=gen, dtype=torch.float64) * mask
    temps = torch.tensor([0.7] * 4 + [1.3] * 4, dtype=torch.float64)
    return PolicyBatch(ids, attn, mask, old, torch.linspace(-1, 1, 8, dtype=torch.float64),
                       group=torch.arange(4).repeat_interleave(2), temperature=temps)


def _rows(batch: PolicyBatch, rows: slice) -> PolicyBatch:
    """``batch[rows]`` at no per-row temperature: its rows are scored at the spec's scalar."""
    return PolicyBatch(batch.input_ids[rows], batch.attention_mask[rows], batch.loss_mask[rows], batch.old_logp[rows],
                       batch.adv[rows], group=batch.group[rows])


def _grads(model) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return out


def test_each_row_is_scored_at_the_temperature_it_was_sampled_at():
    tok = make_tokenizer()
    model = make_model(tok, dtype=torch.float64)
    with torch.no_grad():  # logits far from uniform, so that the temperature matters
        model.get_output_embeddings().weight.mul_(30.0)
    batch = _two_temperature_batch(tok)
    halves = ((slice(0, 4), 0.7), (slice(4, 8), 1.3))
    n_items = count_items(batch.loss_mask, "token_mean")
    loss, _ = policy_loss(model, batch, LossSpec(temperature=1.0), num_items=n_items)  # the rows' own, not 1.0
    loss.backward()
    mixed = _grads(model)
    parts = [policy_loss(model, _rows(batch, rows), LossSpec(temperature=t), num_items=n_items)[0] for rows, t in halves]
    sum(parts).backward()
    separate = _grads(model)
    assert torch.allclose(loss, sum(parts), rtol=1e-10, atol=1e-12)
    for n in mixed:
        assert torch.allclose(mixed[n], separate[n], rtol=1e-8, atol=1e-12), n
    with torch.no_grad():  # the per-row temperatures did change what is scored
        at_one = token_logprobs(model, batch.input_ids, batch.attention_mask, loss_mask=batch.loss_mask)
        at_own = token_logprobs(model, batch.input_ids, batch.attention_mask, loss_mask=batch.loss_mask,
                                temperature=batch.temperature)
    assert (at_one - at_own).abs().max() > 0.1
    # the stale-batch correction recomputes old_logp at each row's own temperature too
    fixed = correct_staleness(batch, model, lag=1, temperature=1.0, micro_batch_size=3)
    with torch.no_grad():
        want = torch.cat([token_logprobs(model, batch.input_ids[rows], batch.attention_mask[rows],
                                         loss_mask=batch.loss_mask[rows], temperature=t) for rows, t in halves])
    assert torch.allclose(fixed.old_logp, want * (batch.loss_mask > 0), atol=1e-9)
    # micro-batches (rows regrouped) take their rows' temperatures with them
    updated = []
    for mbs in (8, 3):
        m = make_model(tok, dtype=torch.float64)
        policy_update(m, torch.optim.SGD(m.parameters(), lr=0.5), batch, LossSpec(), micro_batch_size=mbs,
                      max_grad_norm=1e9)
        updated.append(m)
    for a, b in zip(updated[0].parameters(), updated[1].parameters(), strict=True):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="PolicyBatch.temperature has shape"):
        PolicyBatch(batch.input_ids, batch.attention_mask, batch.loss_mask, batch.old_logp, batch.adv,
                    temperature=torch.ones(3))


# -- sampling and training -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_embedded_default(tmp_path_factory.mktemp("m") / "m", spec=EmbeddedModelSpec(hidden_size=64))


def test_a_task_whose_group_repeats_itself_is_sampled_hotter_next_time(model_dir):
    policy = load_policy(model_dir)
    cfg = adaptive_cfg()
    adaptive = adaptive_sampling(cfg)
    sampler = TaskSampler(TASKS, seed=0)  # 4 tasks, 4 a step: every task every step
    ids = [t.id for t in TASKS]
    torch.manual_seed(0)
    steps = []
    with Service(LocalBackend({"math": DomainHooks(first_even)})) as svc:
        for step in range(3):
            planned = dict(zip(ids, adaptive.settings(ids), strict=True))  # before the step
            tasks, groups, metrics = sample_groups(policy, sampler, svc, cfg, RewardWeights(), None, step=step,
                                                   adaptive=adaptive)
            steps.append(({t.id: g for t, g in zip(tasks, groups, strict=True)}, planned, metrics))
    for groups, planned, metrics in steps:  # each group sampled at its task's (temperature, cap)
        for task_id, group in groups.items():
            assert {e.temperature for e in group} == {planned[task_id][0]}
            assert max(len(completion_ids(e)) for e in group) <= planned[task_id][1]
        assert metrics["adaptive/temperature_mean"] == pytest.approx(sum(t for t, _ in planned.values()) / 4)
        assert metrics["adaptive/budget_mean"] == sum(c for _, c in planned.values()) / 4
    repeated = 0
    for (groups, planned, _), (_, planned_next, _) in zip(steps, steps[1:], strict=False):
        for task_id, group in groups.items():
            t, t_next = planned[task_id][0], planned_next[task_id][0]
            if diversity([completion_ids(e) for e in group])["dup_rate"] > 0:  # repeated itself: x2, at most 0.8
                repeated += 1
                assert t_next == pytest.approx(min(0.8, 2 * t)) and t_next > t
            else:  # back towards rl.temperature
                assert t_next == pytest.approx(max(BASE_T, t / 2))
    assert repeated >= 1  # the case under test happened


class Stop(Exception):
    pass


def run(model_dir, out, *, k=0, steps=4, resume=False, stop_at=None, **kw):
    policy = load_policy(model_dir)
    cfg = adaptive_cfg(steps=steps, max_staleness=k, **kw)
    seen: list[dict] = []

    def progress(done: int) -> None:
        if done == stop_at:
            raise Stop

    with Service(LocalBackend({"math": DomainHooks(first_even)})) as svc:
        train_grpo(policy, TASKS, svc, cfg, reward_weights=RewardWeights(), out=out, seed=0, resume=resume,
                   log=seen.append, progress=progress)
    return policy.model.state_dict(), seen


def same_weights(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def no_timings(metrics: list[dict]) -> list[str]:
    """The metrics but timings and the service's job counters (its verdict cache is in memory, not in a
    checkpoint: a resumed run verifies again what the first run had cached -- with 4 tasks and 2
    tokens, often; the same with both options off)."""
    return [json.dumps({k: v for k, v in m.items() if k not in TIMINGS and not k.startswith("sched/")}, sort_keys=True)
            for m in metrics]


def test_grpo_with_both_options_trains_and_logs_them(model_dir, tmp_path):
    start = load_policy(model_dir).model.state_dict()
    trained, seen = run(model_dir, tmp_path / "run", kl_coef=0.01)  # the reference scores rows at theirs too
    assert not same_weights(trained, start)
    assert all(m["loss"] == m["loss"] and "adaptive/temperature_mean" in m and "adaptive/budget_mean" in m
               for m in seen)
    assert seen[0]["adaptive/temperature_mean"] == BASE_T and seen[0]["adaptive/budget_mean"] == 2.0
    assert max(m["adaptive/temperature_mean"] for m in seen) > BASE_T  # some task was heated
    assert {m["adaptive/budget_mean"] for m in seen} != {2.0}  # some task's cap moved
    state = load_latest(tmp_path / "run" / "checkpoints" / "rl-state").extra["adaptive"]
    assert set(state["temperature"]) == {t.id for t in TASKS} and set(state["budget"]["caps"]) == {t.id for t in TASKS}


@pytest.mark.parametrize("k", [0, 1])
def test_exact_resume_with_both_options_on(model_dir, tmp_path, k):
    ref, ref_m = run(model_dir, tmp_path / "ref", k=k, steps=5)
    out = tmp_path / "stopped"
    with pytest.raises(Stop):
        run(model_dir, out, k=k, steps=5, stop_at=3)  # after the checkpoint of step 2
    assert load_latest(out / "checkpoints" / "rl-state").step == 2
    resumed, resumed_m = run(model_dir, out, k=k, steps=5, resume=True)
    assert same_weights(ref, resumed)
    assert no_timings(resumed_m) == no_timings(ref_m[2:])
    assert len({m["adaptive/temperature_mean"] for m in ref_m}) > 1  # temperatures did vary over the run


# -- the recipe ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("override", "needle"), [
    ("rl.adaptive_temperature.step=0.9", "rl.adaptive_temperature.step: expected a number > 1, got 0.9"),
    ("rl.adaptive_temperature.high=0.5", "rl.adaptive_temperature.high: expected >= rl.temperature (1.0)"),
    ("rl.adaptive_temperature.target_dup=1", "rl.adaptive_temperature.target_dup: expected a number in [0, 1)"),
    ("rl.adaptive_temperature.hi=2", "unknown key 'rl.adaptive_temperature.hi' (did you mean 'high'?)"),
    ("rl.adaptive_budget.low=30", "rl.adaptive_budget.low: expected <= rl.max_new_tokens (24)"),
    ("rl.adaptive_budget.hard=0.9", "rl.adaptive_budget.hard: expected < rl.adaptive_budget.easy (0.8)"),
    ("rl.adaptive_budget.grow=1", "rl.adaptive_budget.grow: expected a number > 1, got 1"),
    ("rl.adaptive_budget.high=400", "the model has 256 positions, the recipe needs 445: the longest prompt"),
])
def test_a_bad_adaptive_value_is_one_line_naming_its_key(override, needle):
    with pytest.raises(ConfigError) as e:
        load_recipe(EMBEDDED_RECIPE, [override])
    assert needle in str(e.value) and "\n" not in str(e.value)
    if "high=400" in override:
        assert "rl.adaptive_budget.high 400" in str(e.value)


def test_the_options_off_by_default_and_on_with_the_sections_defaults():
    off = load_recipe(EMBEDDED_RECIPE).rl
    assert off.adaptive_temperature is None and off.adaptive_budget is None and adaptive_sampling(off) is None
    on = load_recipe(EMBEDDED_RECIPE, ["rl.adaptive_temperature={}", "rl.adaptive_budget={}"]).rl
    assert on.adaptive_budget.high == 4 * on.max_new_tokens == on.most_new_tokens
    adaptive = adaptive_sampling(on)
    assert adaptive.settings(["any"]) == [(on.temperature, on.max_new_tokens)]
