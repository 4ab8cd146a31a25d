"""RL state that is not this run's, cut short, or named by an edited ``latest``: one line naming the file.

A real tiny GRPO run (a 1-layer Llama, the math verifier through the service, PPO's critic and a KL
reference on) writes ``RUN/checkpoints/rl-state``; each case copies it and edits the copy.

- Another run's RL state (its seed differs) resumed with ``ValueError``'s traceback (exit 1) that
  named neither the file nor the run; now a ``CheckpointError`` naming ``state.json`` and both seeds.
- ``reference.pt`` and ``critic-N.pt`` sit beside the step directories, outside every manifest: one
  cut short passed ``load_latest`` and failed at the load with torch's traceback (after the pipeline
  had re-evaluated the stages before RL); now the checkpoint's manifest lists them, so ``load_latest``
  (which the pipeline calls before any work) names the file.
- ``posttrain tasks stats`` read ``latest`` itself: a bare ``step-N`` (a form ``load_latest`` resumes)
  was "no checkpoint", and ``../`` was followed into a neighbour run's checkpoint; now it reads
  ``latest`` as a resume does, and refuses a name out of its directory naming the file.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from posttrain.cli import main
from posttrain.envs import get_domain
from posttrain.errors import UserError
from posttrain.policy import load_policy
from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service
from posttrain.tasks import run_stats
from posttrain.train._critic import Critic
from posttrain.train.checkpoint import CheckpointError, load_latest
from posttrain.train.grpo import train_grpo
from posttrain.train.recipe import RLConfig
from posttrain.types import Task
from posttrain.verify.rewards import RewardWeights

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "policy"))
from _chat_models import qwen_char_tokenizer  # noqa: E402
from test_chat_prompts import tiny_llama_dir  # noqa: E402

TASKS = [Task(id=f"m{i}", domain="math", prompt=f"{i}+1?", fields={"answer": str(i + 1)}) for i in range(2)]
CFG = RLConfig(steps=1, prompts_per_step=2, group_size=2, max_new_tokens=4, checkpoint_every=1, kl_coef=0.05,
               algorithm="ppo")


def _train(model: Path, run: Path, *, seed: int, resume: bool = False) -> None:
    policy = load_policy(model, chat=False)
    critic = Critic(Path(policy.path), policy.tokenizer.pad_token_id, lr=1e-3)
    hooks = {"math": DomainHooks(get_domain("math").make_verifier(None))}
    with Service(LocalBackend(hooks), SchedPolicy(max_tries=2, backoff_s=0.01)) as svc:
        train_grpo(policy, TASKS, svc, CFG, reward_weights=RewardWeights(), out=run, seed=seed, critic=critic,
                   resume=resume)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    """The model and a run (seed 0) with one RL checkpoint, its reference and its critic beside it."""
    root = tmp_path_factory.mktemp("rl")
    model = tiny_llama_dir(root / "model", qwen_char_tokenizer())
    _train(model, root / "run", seed=0)
    state = root / "run" / "checkpoints" / "rl-state"
    assert (state / "reference.pt").is_file() and (state / "critic-1.pt").is_file()
    return model, root / "run"


def _copy(run: Path, dst: Path) -> Path:
    return Path(shutil.copytree(run, dst))


def test_another_runs_rl_state_is_one_line_naming_state_json(run, tmp_path):
    model, src = run
    other = _copy(src, tmp_path / "other")
    with pytest.raises(CheckpointError) as e:  # this run's seed is 1; the RL state's sampler was seeded 0
        _train(model, other, seed=1, resume=True)
    msg = str(e.value)
    assert "state.json" in msg and "seed 0" in msg and "1" in msg and "\n" not in msg, msg
    assert isinstance(e.value, UserError)  # the CLI's one line and exit 2
    assert load_latest(other / "checkpoints" / "rl-state").step == 1  # nothing written over


@pytest.mark.parametrize("name", ["reference.pt", "critic-1.pt"])
def test_a_truncated_file_beside_the_checkpoint_is_refused_by_load_latest(run, tmp_path, name):
    _, src = run
    d = _copy(src, tmp_path / "cut")
    f = d / "checkpoints" / "rl-state" / name
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(CheckpointError) as e:
        load_latest(d / "checkpoints" / "rl-state")
    msg = str(e.value)
    assert name in msg and "\n" not in msg, msg


@pytest.mark.parametrize("name", ["reference.pt", "critic-1.pt"])
def test_a_truncated_file_of_an_older_manifest_is_refused_at_its_load(run, tmp_path, name):
    """A checkpoint saved before its manifest listed the files beside it: the load itself names the file."""
    model, src = run
    d = _copy(src, tmp_path / "old")
    manifest = d / "checkpoints" / "rl-state" / "step-000001" / "MANIFEST.json"
    manifest.write_text(json.dumps({k: v for k, v in json.loads(manifest.read_text()).items() if k != "beside"}))
    f = d / "checkpoints" / "rl-state" / name
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(CheckpointError) as e:
        _train(model, d, seed=0, resume=True)
    msg = str(e.value)
    assert msg.startswith(str(f)) and "\n" not in msg, msg


def test_the_whole_run_resumes(run, tmp_path):
    model, src = run
    d = _copy(src, tmp_path / "whole")
    _train(model, d, seed=0, resume=True)  # finished: resumes at step 1 and stops there
    assert load_latest(d / "checkpoints" / "rl-state").step == 1


# -- posttrain tasks stats ----------------------------------------------------------------------------


def _stats_run(root: Path, latest: str, estimate: float) -> Path:
    """A run directory with one trajectory and an RL checkpoint whose pool estimates task t at ``estimate``."""
    (root / "trajectories").mkdir(parents=True)
    (root / "trajectories" / "rl.jsonl").write_text(json.dumps(
        {"step": 0, "task_id": "t", "domain": "math", "outcome": "pass"}) + "\n")
    state = root / "checkpoints" / "rl-state"
    (state / "step-000001").mkdir(parents=True)
    (state / "step-000001" / "state.json").write_text(json.dumps(
        {"step": 1, "extra": {}, "sampler_state": {"kind": "pool", "difficulty": {"tasks": {"t": [estimate, 1]}}}}))
    (state / "latest").write_text(latest)
    return root


def test_stats_reads_a_bare_latest_name_as_a_resume_does(tmp_path):
    a = _stats_run(tmp_path / "a", "step-000001\n", 0.05)
    stats = run_stats(a)
    assert stats.estimates == "the pool's estimates" and stats.domains["math"].histogram[0] == 1


def test_stats_does_not_follow_latest_into_a_neighbour_run(tmp_path, capsys):
    _stats_run(tmp_path / "b", json.dumps({"name": "step-000001"}), 0.95)
    a = _stats_run(tmp_path / "a", json.dumps({"name": "../../../b/checkpoints/rl-state/step-000001"}), 0.05)
    with pytest.raises(UserError) as e:
        run_stats(a)
    msg = str(e.value)
    assert str(a / "checkpoints" / "rl-state" / "latest") in msg and "step-N" in msg and "\n" not in msg, msg
    assert main(["tasks", "stats", str(a)]) == 2  # posttrain tasks stats: its one line, exit 2
    assert capsys.readouterr().err.strip() == f"posttrain: error: {msg}"


def test_the_cli_refuses_another_runs_rl_state_before_any_work(run, tmp_path):
    """The header's resume point reads the RL state's sampler seed before the stages before RL run
    again (``train_grpo`` refused it only after they had)."""
    from posttrain.cli._header import resume_point
    from posttrain.train.recipe import Recipe

    _, src = run
    other = _copy(src, tmp_path / "other")
    (other / "checkpoints" / "base").mkdir()
    (other / "checkpoints" / "base" / "DONE").write_text("")
    assert resume_point(Recipe(stages=("rl",), seed=0), other).startswith("resumed at stage rl step 1")
    with pytest.raises(CheckpointError, match=r"state\.json: its task sampler was seeded 0, this run's seed is 1") as e:
        resume_point(Recipe(stages=("rl",), seed=1), other)
    assert "\n" not in str(e.value)
