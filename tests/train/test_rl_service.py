"""GRPO verifies through the execution service: its counters and breaker states per step in the
metrics, its scheduler state in every RL checkpoint and back on resume, and a sample that runs out
of infra retries drops its whole group from the update (counted, never scored).

Real embedded model, real math verifier; the one double is a host in front of that verifier that
answers infra for one task (what a dying sandbox host looks like to the service)."""

import math

from posttrain.envs import get_domain
from posttrain.policy import build_embedded_default, load_policy
from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service
from posttrain.train.checkpoint import load_latest
from posttrain.train.grpo import train_grpo
from posttrain.train.recipe import RLConfig
from posttrain.types import Task, Verdict
from posttrain.verify.rewards import RewardWeights

TASKS = [Task(id=f"m{i}", domain="math", prompt=f"{i}+1=", fields={"answer": str(i + 1)}) for i in range(4)]
POLICY = SchedPolicy(max_tries=2, backoff_s=0.01)


def _hooks(down: str | None = None) -> dict[str, DomainHooks]:
    real = get_domain("math").make_verifier(None)

    def verify(task: Task, response: str) -> Verdict:
        if task.id == down:
            return Verdict.infra("host went away", error_class="infra:sandbox")
        return real(task, response)

    return {"math": DomainHooks(verify)}


def _train(tmp_path, svc, *, steps, resume=False, seen=None):
    torch_seed_policy = load_policy(tmp_path / "m")
    cfg = RLConfig(steps=steps, prompts_per_step=4, group_size=2, max_new_tokens=4, checkpoint_every=1)
    train_grpo(torch_seed_policy, TASKS, svc, cfg, reward_weights=RewardWeights(), out=tmp_path / "run", seed=0,
               resume=resume, log=(seen if seen is not None else []).append)


def test_service_metrics_per_step_and_its_state_in_checkpoints_and_back_on_resume(tmp_path):
    build_embedded_default(tmp_path / "m")
    seen: list[dict[str, float]] = []
    with Service(LocalBackend(_hooks()), POLICY) as svc:
        _train(tmp_path, svc, steps=2, seen=seen)
    assert [m["step"] for m in seen] == [0, 1]
    for m in seen:  # every verification of the step went through the service, counted per step
        assert m["sched/jobs"] + m["sched/cache_hits"] + m["sched/deduplicated"] == 4 * 2
        assert m["sched/breaker/domain:math"] == 0.0 and m["groups_dropped"] == 0.0
    ckpt = load_latest(tmp_path / "run" / "checkpoints" / "rl-state")
    saved = ckpt.extra["sched"]
    assert set(saved["estimator"]["task"]) <= {t.id for t in TASKS} and saved["estimator"]["task"]
    assert saved["domain_breakers"]["math"]["state"] == "closed"
    # a fresh service resumed from the checkpoint holds the same estimates, breakers and counters
    with Service(LocalBackend(_hooks()), POLICY) as fresh:
        assert fresh.state_dict()["estimator"]["task"] == {}
        _train(tmp_path, fresh, steps=2, resume=True)  # nothing left to run: only the restore
        assert fresh.state_dict() == saved


def test_a_sample_out_of_infra_retries_drops_its_whole_group_counted_never_scored(tmp_path):
    build_embedded_default(tmp_path / "m")
    seen: list[dict[str, float]] = []
    with Service(LocalBackend(_hooks(down="m2")), POLICY) as svc:
        _train(tmp_path, svc, steps=1, seen=seen)
    [m] = seen  # 4 prompts of 4 tasks: m2 is drawn once
    assert m["groups_dropped"] == 1.0 and m["sched/groups_dropped"] == 1.0
    assert m["sched/samples_dropped"] == 2.0 and m["sched/exhausted"] >= 1.0
    assert m["infra_error_rate"] == 0.25  # both samples of m2, never scored 0 or 1
    assert not math.isnan(m["reward_mean"])  # the other three groups are scored
