"""Generation overlapping training (``rl.max_staleness``, posttrain/train/_overlap.py) on a real
tiny Llama through ``train_grpo`` and the execution service:

- K = 0 through the generator machinery (its own weight copy, each version broadcast and checked,
  sampling in another thread) reproduces the synchronous loop bit for bit: weights and metrics;
- K = 1: the batch of step s is sampled by version max(0, s - 1), with the truncated-IS correction;
- exact resume with a batch in flight: stop after a checkpoint, resume, same weights and metrics
  as the uninterrupted K = 1 run.

The verifier is a rule on the response (its first character has an even code point: about half
pass), so that a random model gets reward variance and the update moves the weights.
"""

from __future__ import annotations

import json
import math
import time

import pytest
import torch

from posttrain.policy import EmbeddedModelSpec, SamplingParams, build_embedded_default, load_policy
from posttrain.sched import DomainHooks, LocalBackend, Service
from posttrain.train._overlap import CopiedWeights, Rollouts, correct_staleness
from posttrain.train.checkpoint import load_latest
from posttrain.train.grpo import build_batch, rewards_of, train_grpo
from posttrain.train.recipe import RLConfig
from posttrain.types import Task, Trajectory, Turn, Verdict
from posttrain.verify.rewards import RewardWeights

TASKS = [Task(id=f"m{i}", domain="math", prompt=f"{i}+{i % 7}=", fields={"answer": str(i + i % 7)}) for i in range(24)]
TIMINGS = {"wall_s", "step_s", "tokens_per_s", "gen_s", "gen_idle_s", "train_idle_s"}


def first_even(task: Task, response: str) -> Verdict:
    ok = bool(response) and ord(response[0]) % 2 == 0
    return Verdict("pass" if ok else "fail", float(ok))


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_embedded_default(tmp_path_factory.mktemp("m") / "m", spec=EmbeddedModelSpec(hidden_size=64))


def run(model_dir, out, *, k, copy=False, steps=4, resume=False, stop_at=None):
    policy = load_policy(model_dir)
    cfg = RLConfig(steps=steps, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=1e-2, checkpoint_every=2,
                   max_staleness=k)
    seen: list[dict] = []

    def progress(done: int) -> None:
        if done == stop_at:
            raise Stop

    with Service(LocalBackend({"math": DomainHooks(first_even)})) as svc:
        train_grpo(policy, TASKS, svc, cfg, reward_weights=RewardWeights(), out=out, seed=0, resume=resume,
                   log=seen.append, progress=progress, rollout=CopiedWeights(policy) if copy else None)
    return policy.model.state_dict(), seen


def same_weights(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def no_timings(metrics: list[dict]) -> list[str]:
    return [json.dumps({k: v for k, v in m.items() if k not in TIMINGS}, sort_keys=True) for m in metrics]


def test_k0_through_the_generator_reproduces_the_synchronous_loop(model_dir, tmp_path):
    start = load_policy(model_dir).model.state_dict()
    sync, sync_m = run(model_dir, tmp_path / "sync", k=0)
    gen, gen_m = run(model_dir, tmp_path / "gen", k=0, copy=True)
    assert not same_weights(sync, start)  # the run trained
    assert same_weights(sync, gen)
    assert no_timings(sync_m) == no_timings(gen_m)
    assert [m["policy_lag"] for m in gen_m] == [0, 0, 0, 0]
    assert all(m["gen_idle_s"] >= 0 and m["train_idle_s"] >= 0 for m in gen_m)


def test_k1_samples_lag_by_exactly_one_version(model_dir, tmp_path):
    sync, _ = run(model_dir, tmp_path / "sync", k=0)
    stale, seen = run(model_dir, tmp_path / "k1", k=1)
    assert [m["policy_version"] for m in seen] == [0, 0, 1, 2]
    assert [m["policy_lag"] for m in seen] == [0, 1, 1, 1]
    assert not same_weights(sync, stale)  # steps 1.. trained on samples of the previous version
    assert all(math.isfinite(m["loss"]) for m in seen)


def test_exact_resume_with_a_batch_in_flight(model_dir, tmp_path):
    ref, ref_m = run(model_dir, tmp_path / "ref", k=1, steps=5)
    out = tmp_path / "stopped"
    with pytest.raises(Stop):
        run(model_dir, out, k=1, steps=5, stop_at=3)  # after the checkpoint of step 2, during step 2's end
    ckpt = load_latest(out / "checkpoints" / "rl-state")
    assert ckpt.step == 2
    [queued] = ckpt.extra["overlap"]["queued"]  # step 2's batch, sampled by version 1 before the stop
    assert (queued["step"], queued["policy_version"]) == (2, 1)
    assert {t["policy_version"] for g in queued["groups"] for t in g} == {1}
    resumed, resumed_m = run(model_dir, out, k=1, steps=5, resume=True)
    assert same_weights(ref, resumed)
    assert no_timings(resumed_m) == no_timings(ref_m[2:])


def test_a_checkpoint_of_another_staleness_is_refused(model_dir, tmp_path):
    from posttrain.errors import UserError

    with pytest.raises(Stop):
        run(model_dir, tmp_path / "r", k=1, stop_at=3)
    with pytest.raises(UserError, match="rl.max_staleness: the checkpoint was written with 1, the recipe says 2"):
        run(model_dir, tmp_path / "r", k=2, resume=True)


def test_stale_rows_get_the_current_logprobs_and_keep_the_sampled_ones_for_truncated_is(model_dir):
    policy = load_policy(model_dir)
    turn = Turn((1, 5, 6), (7, 8, 2), (-0.5, -0.25, -2.0), "eos", Verdict("pass", 1.0))
    groups = [[Trajectory("t", "g", 0, (turn,), 1.0), Trajectory("t", "g", 1, (turn,), 1.0)]]
    rewards, _ = rewards_of(groups, RewardWeights())
    batch = build_batch(groups, rewards, pad_id=0)
    assert correct_staleness(batch, policy.model, lag=0, temperature=1.0, micro_batch_size=1) is batch
    fixed = correct_staleness(batch, policy.model, lag=1, temperature=1.0, micro_batch_size=1)
    assert torch.equal(fixed.sampling_logp, batch.old_logp)
    with torch.no_grad():
        logits = policy.model(torch.tensor([[1, 5, 6, 7, 8, 2]])).logits[0, 2:5]
    want = torch.log_softmax(logits, -1).gather(-1, torch.tensor([[7], [8], [2]])).squeeze(-1)
    assert torch.allclose(fixed.old_logp[0, 3:], want, atol=1e-5) and (fixed.old_logp[:, :3] == 0).all()


def test_a_checkpoint_holds_the_state_after_its_queued_batches_not_the_generators_now(model_dir):
    """The generator may already sample step c+K when the checkpoint after step c-1 is taken: the
    checkpoint must restore the RNG as it was right after the batches it queues (c..c+K-1)."""
    policy = load_policy(model_dir)
    prompts = [policy.encode_prompt("1+1=")] * 2

    def generate(step, version, gen):
        out = gen.generate(prompts, SamplingParams(max_new_tokens=4))
        return [], [[Trajectory("t", str(step), i, (Turn(g.prompt_ids, g.completion_ids, g.logprobs, g.stop_reason),),
                                0.0, policy_version=version) for i, g in enumerate(out)]], {}

    torch.manual_seed(0)
    rollouts = Rollouts(generate, CopiedWeights(policy), policy.model, max_staleness=1, start=0, steps=4,
                        snapshot=lambda: {"rng": torch.get_rng_state()})
    try:
        got = []
        for step in (0, 1):
            batch, _ = rollouts.get(step)
            got.append(batch.policy_version)
            rollouts.publish(step + 1, policy.model)
        deadline = time.monotonic() + 60
        while 3 not in rollouts._queue and time.monotonic() < deadline:  # the generator ran ahead to step 3
            time.sleep(0.01)
        queued, after = rollouts.checkpoint(2)
    finally:
        rollouts.close()
    assert got == [0, 0] and [(b.step, b.policy_version) for b in queued] == [(2, 1)]
    assert {t.policy_version for g in queued[0].groups for t in g} == {1}
    assert torch.equal(after["rng"], queued[0].after["rng"])
    assert not torch.equal(after["rng"], torch.get_rng_state())  # step 3 drew since


def test_queued_tool_episodes_round_trip_through_a_checkpoint() -> None:
    """A checkpoint holds the batches in flight as JSON: a turn's tool calls (``ToolCallRecord``) made
    ``save_checkpoint`` refuse the whole checkpoint ("extra must be JSON-serializable") in any run with
    ``rl.max_staleness`` > 0 whose episodes call tools; they come back as they were."""
    import json

    from posttrain.train._overlap import Batch, batches_from_json, batches_to_json
    from posttrain.types import Task, ToolCallRecord, Trajectory, Turn, Verdict

    calls = (ToolCallRecord("bash", {"command": "ls -l", "timeout": 3}, "a.py\n", True, 0.0512345678),
             ToolCallRecord("edit", {"path": "a.py"}, "error: no such file", False, 1e-7))
    traj = Trajectory("t", "g", 0, (Turn((1, 2), (3, 4), (-0.5, -0.25), "eos", None, "call", calls),
                                    Turn((5,), (6,), (-1.0,), "eos", Verdict("pass", 1.0), "done")), 1.0)
    task = Task(id="t", domain="test", prompt="?", fields={})
    saved = json.loads(json.dumps(batches_to_json([Batch(3, 2, [task], [[traj]], {}, {})], 1)))
    [back] = batches_from_json(saved, 1, {"t": task}, after={})
    assert back.groups == [[traj]]
