"""End-to-end: the RL stage on 2 data-parallel ranks (``rl.data_parallel: 2``, gloo, FSDP2) through
``posttrain run`` (issue 25): each rank samples and verifies half of every step's tasks and every
rank updates on the whole batch; a real kill -9 of rank 0 mid-run ends rank 1 too and ``--resume``
gives the uninterrupted run's weights, metrics and tasks bit for bit; a rank that dies, before the
first step or during training, is one line naming it, exit 1, never a hang. The same run launched by
``torchrun`` (every process started at once, ranks 1..N-1 waiting on torchrun's store through the SFT
stage) gives the same weights, metrics and tasks.

Each run is a real subprocess (real embedded model, real sandboxed math checks), about 15 s."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from run_logs import here, rl_rows, sha, tasks_per_step

from posttrain.cli._ranks import RankError, RankSpec, ranks
from posttrain.config import parse_config
from posttrain.train.recipe import Recipe

ROOT = Path(__file__).resolve().parents[2]
STEPS = 4  # a checkpoint at step 2 and two steps after it: enough for a kill -9 and a bit-exact resume
RECIPE = f"""\
seed: 0
stages: [sft, rl]
model: {{name: embedded, hidden_size: 64}}
tasks: {{domains: [math], n_train_per_domain: 40, n_eval_per_domain: 8}}
sft: {{epochs: 1, batch_size: 32, lr: 0.003}}
rl: {{steps: {STEPS}, prompts_per_step: 4, group_size: 4, max_new_tokens: 12, lr: 0.001, checkpoint_every: 2,
     data_parallel: 2, kl_coef: 0.01}}
eval: {{samples_per_task: 1, max_new_tokens: 12}}
reward: {{outcome: 1.0, length: 1.0, max_tokens: 12, overlong_buffer: 10}}
"""


def _cmd(recipe: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "posttrain.cli", "run", str(recipe), "--out", str(out), *extra]


def _rank_pids(out: Path) -> list[int]:
    """The rank processes (1..N-1) started for the run in ``out``."""
    spec = str(out / "logs" / "rl-ranks" / "spec.pkl")
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"posttrain.cli._rank_main" in argv and spec.encode() in argv:
            pids.append(int(proc.name))
    return pids


def _kill_rank_0_after_a_checkpoint(recipe: Path, out: Path, *extra: str) -> None:
    """Start the run, kill -9 rank 0 (and its own children; rank 1 runs in its own session) once its
    first RL checkpoint is written, and wait for rank 1 to end with it."""
    proc = subprocess.Popen(_cmd(recipe, out, *extra), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    latest = out / "checkpoints" / "rl-state" / "latest"
    deadline = time.time() + 300
    while not latest.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert json.loads(latest.read_text())["step"] < STEPS
    deadline = time.time() + 30
    while _rank_pids(out) and time.time() < deadline:
        time.sleep(0.1)
    assert not _rank_pids(out), "rank 1 outlived rank 0"


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("dp") / "dp.yaml"
    path.write_text(RECIPE)
    return path


@pytest.fixture(scope="module")
def ref(recipe: Path) -> Path:
    out = recipe.parent / "ref"
    p = subprocess.run(_cmd(recipe, out), capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


@pytest.mark.slow
def test_two_ranks_share_each_step_and_train_on_the_whole_batch(ref: Path) -> None:
    rows = [json.loads(x) for x in (ref / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert [r["step"] for r in rl] == list(range(STEPS))
    assert all(r["groups_kept"] == 4 for r in rl)
    assert all(r["sched/jobs"] == 8 for r in rl)  # rank 0 verified its half: 2 tasks x 4 episodes
    assert [len(t) for t in tasks_per_step(ref, every_sample=True)] == [16] * STEPS  # the whole step, gathered, logged once
    assert all(r["grad_norm"] > 0 and r["skipped"] == 0 for r in rl)
    assert sum(r["frac_zero_std"] for r in rl) < STEPS  # some groups carry a gradient
    assert sorted(p.name for p in (ref / "logs" / "rl-ranks").iterdir()) == ["rank-1.log", "spec.pkl"]
    summary = json.loads((ref / "summary.json").read_text())
    assert "rl" in summary["eval"]
    start = torch.load(ref / "checkpoints" / "rl-state" / f"step-{STEPS:06d}" / "state.pt", weights_only=True)
    assert len(start["rng"]["ranks"]) == 2  # every rank's RNG streams, for an exact resume
    assert not torch.equal(start["rng"]["ranks"][0]["torch"], start["rng"]["ranks"][1]["torch"])
    assert not _rank_pids(ref)


@pytest.mark.slow
def test_kill_9_of_rank_0_mid_run_ends_rank_1_and_resume_is_bit_exact(recipe: Path, ref: Path) -> None:
    out = recipe.parent / "killed"
    _kill_rank_0_after_a_checkpoint(recipe, out)
    p = subprocess.run(_cmd(recipe, out, "--resume"), capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert sha(out / "checkpoints" / "rl" / "model.safetensors") == sha(ref / "checkpoints" / "rl" / "model.safetensors")
    assert rl_rows(out) == rl_rows(ref)
    assert tasks_per_step(out, every_sample=True) == tasks_per_step(ref, every_sample=True)


@pytest.mark.slow
def test_a_bf16_run_steps_fp32_shards_and_resumes_bit_exactly(recipe: Path) -> None:
    """``model.dtype: bfloat16`` on 2 ranks: FSDP2 mixed precision over fp32 shards (train/_dist.py),
    the checkpoints carry those fp32 weights as the optimizer's masters beside a bf16 model file, and
    a kill -9 mid-run resumes to the uninterrupted run's weights and metrics bit for bit (without the
    masters the resumed shards start from the rounded bf16 file and drift: measured)."""
    bf16 = ("--set", "model.dtype=bfloat16")
    ref, out = recipe.parent / "bf16-ref", recipe.parent / "bf16-killed"
    p = subprocess.run(_cmd(recipe, ref, *bf16), capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    rl = rl_rows(ref)
    assert len(rl) == STEPS and all(r["grad_norm"] > 0 and r["skipped"] == 0 for r in rl)
    state = torch.load(ref / "checkpoints" / "rl-state" / f"step-{STEPS:06d}" / "state.pt", weights_only=True)
    per_param = list(state["optimizer"]["state"].values())
    assert per_param and all(s["master"].dtype == s["exp_avg"].dtype == torch.float32 for s in per_param)
    from safetensors import safe_open

    with safe_open(str(ref / "checkpoints" / "rl" / "model.safetensors"), "pt") as f:
        assert all(str(f.get_tensor(k).dtype) == "torch.bfloat16" for k in f.keys())
    _kill_rank_0_after_a_checkpoint(recipe, out, *bf16)
    p = subprocess.run(_cmd(recipe, out, *bf16, "--resume"), capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert sha(out / "checkpoints" / "rl" / "model.safetensors") == sha(ref / "checkpoints" / "rl" / "model.safetensors")
    assert rl_rows(out) == rl_rows(ref)


@pytest.mark.slow
def test_a_rank_killed_during_training_fails_the_run_in_one_line(recipe: Path) -> None:
    out = recipe.parent / "rank1-killed"
    proc = subprocess.Popen(_cmd(recipe, out), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.time() + 300
    while not _rank_pids(out) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    pids = _rank_pids(out)
    assert pids, "rank 1 never started"
    os.kill(pids[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("posttrain: error: rl.data_parallel: rank 1 failed (killed by signal 9"), last
    assert str(out / "logs" / "rl-ranks" / "rank-1.log") in last


def test_a_rank_that_cannot_start_is_an_error_naming_it(tmp_path: Path) -> None:
    recipe = parse_config(Recipe, {"stages": ["rl"], "rl": {"data_parallel": 2}})
    spec = RankSpec(tmp_path, recipe, [], [], start=tmp_path / "no-such-checkpoint", resume=False)
    with pytest.raises(RankError, match=r"rank 1 failed \(exit code 1; last line: .*no-such-checkpoint"), ranks(spec):
        pass


def test_what_the_ranks_do_not_run_is_refused_in_one_line(recipe: Path, tmp_path: Path, capsys) -> None:
    """Through ``posttrain.cli.main`` in this process (the CLI's own code: the refusal comes before any
    work), the first case also through the real entry point in a subprocess."""
    cases = [("rl.algorithm=ppo", "rl.algorithm: ppo"), ("rl.max_staleness=1", "rl.max_staleness: 1"),
             ("rl.sampler=vllm", "rl.sampler: vllm"), ("model.lora={r: 4}", "model.lora"),
             ("sched.backend=ray", "sched.backend: ray"), ("rl.reward_model_weight=0.5", "rl.reward_model_weight > 0")]
    for i, (change, says) in enumerate(cases):
        if i == 0:
            p = subprocess.run(_cmd(recipe, tmp_path / "never", "--set", change), capture_output=True, text=True,
                               timeout=120, cwd=ROOT)
        else:
            p = here(capsys, "run", str(recipe), "--out", str(tmp_path / "never"), "--set", change)
        assert p.returncode == 2, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and says in p.stderr and "rl.data_parallel: 2" in p.stderr, p.stderr
        assert not (tmp_path / "never").exists()


@functools.cache
def _plain_threads() -> str:
    """The torch threads a plain ``posttrain run`` starts with (this process's are set to 1 by the
    suite's conftest), read once."""
    return subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                          capture_output=True, text=True, check=True).stdout.strip()


def _torchrun(recipe: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node 2 -m posttrain.cli run ...``, with the torch threads a
    plain ``posttrain run`` gets (torchrun would set OMP_NUM_THREADS=1, and SFT's sums follow it)."""
    env = {**os.environ, "OMP_NUM_THREADS": _plain_threads()}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    return subprocess.run([*torchrun, "-m", "posttrain.cli", "run", str(recipe), "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)


@pytest.mark.slow
def test_torchrun_launches_the_same_run(recipe: Path, ref: Path) -> None:
    out = recipe.parent / "torchrun"
    p = _torchrun(recipe, out)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert "posttrain: rank 1 of 2 (torchrun) waits for rank 0's RL stage" in p.stderr
    assert sha(out / "checkpoints" / "rl" / "model.safetensors") == sha(ref / "checkpoints" / "rl" / "model.safetensors")
    assert rl_rows(out) == rl_rows(ref)
    assert tasks_per_step(out, every_sample=True) == tasks_per_step(ref, every_sample=True)
    assert not (out / "logs" / "rl-ranks").exists()  # torchrun started the ranks; their output is torchrun's
    again = _torchrun(recipe, out, "--resume")  # finished: rank 0 runs no RL stage, rank 1 is told and exits
    assert again.returncode == 0 and "is already finished" in again.stdout + again.stderr, again.stderr[-3000:]


def test_torchrun_with_a_recipe_for_another_world_is_refused_in_one_line(recipe: Path, tmp_path: Path, capsys,
                                                                         monkeypatch) -> None:
    """Each of torchrun's two processes (its environment, set here; ``posttrain.cli.main`` in this
    process: the refusal comes before the ranks meet) refuses in one line, and nothing is written.
    A real torchrun launch: ``test_torchrun_launches_the_same_run``."""
    for change, says in [("rl.data_parallel=3", "rl.data_parallel: 3, but torchrun started 2 processes"),
                         ("stages=[sft]", "torchrun started 2 processes, but only the RL stage runs on ranks")]:
        for rank in ("0", "1"):
            for key, value in {"TORCHELASTIC_RUN_ID": "t", "RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": "2",
                               "LOCAL_WORLD_SIZE": "2"}.items():
                monkeypatch.setenv(key, value)
            p = here(capsys, "run", str(recipe), "--out", str(tmp_path / "never"), "--set", change)
            assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
            assert p.stderr.startswith("posttrain: error: ") and says in p.stderr, p.stderr
            assert not (tmp_path / "never").exists()


def test_torchruns_environment_is_read_as_documented() -> None:
    import doctest

    import posttrain.cli._ranks as module

    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted >= 2
