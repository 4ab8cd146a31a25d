"""A run directory is never left unusable (issue 12, section 2).

Real runs of the tiny recipe in a subprocess (real model, sandbox, verifiers), interrupted the way
a user does it: Ctrl-C reaches the whole process group, ``kill`` sends SIGTERM to the process.
"""

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_logs import here

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny-grpo.yaml"
# the tiny recipe cut further: an interrupt needs an RL checkpoint and steps after it, not a trained
# model (6 RL steps, a checkpoint every 2, one short SFT epoch, 4 eval tasks per domain)
SMALL = ["--set", "tasks.n_train_per_domain=40", "--set", "tasks.n_eval_per_domain=4", "--set", "sft.epochs=1",
         "--set", "rl.steps=6", "--set", "rl.checkpoint_every=2"]
# the quickstart recipe cut to that size
QS_TINY = ["--set", "model.hidden_size=64", "--set", "rl.prompts_per_step=4", "--set", "rl.group_size=4",
           "--set", "rl.max_new_tokens=20", "--set", "eval.samples_per_task=1", "--set", "eval.max_new_tokens=20",
           *SMALL]
CLI = [sys.executable, "-m", "posttrain.cli"]


def _posttrain(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _interrupt(args: list[str], out: Path, sig: signal.Signals, *, group: bool, cwd: Path = ROOT) -> tuple[int, str]:
    """Start ``posttrain *args``, send ``sig`` once RL wrote its first checkpoint; (exit code, stderr)."""
    proc = subprocess.Popen([*CLI, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    latest = out / "checkpoints" / "rl-state" / "latest"
    deadline = time.time() + 300
    while not latest.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # into the next step
    assert proc.poll() is None, "the run finished before it could be interrupted"
    if group:  # Ctrl-C in a terminal: the whole foreground process group
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _refused(capsys, *args: str, cwd: Path = ROOT) -> str:
    """``posttrain *args`` in this process (a refusal comes before any work, so it needs no process of
    its own): exit 2 and one line, which is returned."""
    p = here(capsys, *args, cwd=cwd)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr[-3000:]
    return p.stderr


def _one_line_interrupt(err: str) -> str:
    """The resume command of the one interrupt line, after checking there is one line and no traceback."""
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    lines = [x for x in err.splitlines() if "interrupted" in x]
    assert len(lines) == 1 and err.rstrip().endswith(lines[0]), err[-3000:]
    return lines[0].split("continue with: ", 1)[1]


def _rl_steps(out: Path) -> list[int]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if r["stage"] == "rl"]


def _add_reward_model(run: Path) -> None:
    """A real reward-model checkpoint beside the policies, as the rm stage writes it."""
    from transformers import AutoTokenizer

    from posttrain.train.rm import make_reward_model

    make_reward_model(run / "checkpoints" / "base").save_pretrained(run / "checkpoints" / "rm")
    AutoTokenizer.from_pretrained(run / "checkpoints" / "base").save_pretrained(run / "checkpoints" / "rm")


@pytest.mark.slow
def test_ctrl_c_eval_resume_and_a_finished_run(tmp_path, capsys):
    out = tmp_path / "run"
    code, err = _interrupt(["run", str(TINY), "--out", str(out), *SMALL], out, signal.SIGINT, group=True)
    assert code == 130
    command = _one_line_interrupt(err)
    assert command == shlex.join(["posttrain", "run", str(TINY), "--out", str(out), "--resume", *SMALL])
    assert not (out / "summary.json").exists() and (out / "checkpoints" / "sft" / "DONE").exists()
    leftover = out.parent / "leftover"  # for the corrupt-checkpoint case below
    shutil.copytree(out, leftover)

    # eval of the interrupted run: its own files, under RUN/eval/, named after the protocol
    split = tmp_path / "a" / "heldout.jsonl"
    split.parent.mkdir()
    shutil.copy(out / "tasks" / "eval.jsonl", split)
    evaluate = ["eval", "--run", str(out), "--tasks", str(split), "--limit", "3", "--max-new-tokens", "6", "--json"]
    p = here(capsys, *evaluate)
    assert p.returncode == 0, p.stderr[-3000:]
    assert list(json.loads(p.stdout)["eval"]) == ["base", "sft"]
    assert not (out / "summary.json").exists()
    tag = "heldout3-n1-t0-len6-seed0"
    assert (out / "eval" / f"sft@{tag}.jsonl").is_file()

    # ... so the exact printed command resumes it, to the end
    p = subprocess.run([*CLI, *shlex.split(command)[1:]], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "already finished" not in p.stderr
    assert _rl_steps(out) == list(range(6))
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["eval"]) == {"demonstrator", "base", "sft", "rl"}

    # a finished run: eval never rewrites what the pipeline wrote, and never samples from a reward model
    _add_reward_model(out)
    kept = {p: _sha(p) for p in [out / "summary.json", *(out / "eval").glob("*.jsonl")] if "@" not in p.name}
    assert len(kept) == 5  # summary.json, eval/{demonstrator,base,sft,rl}.jsonl
    p = here(capsys, *evaluate)
    assert p.returncode == 0, p.stderr[-3000:]
    assert list(json.loads(p.stdout)["eval"]) == ["base", "sft", "rl"]
    assert "skipping" in p.stderr and "rm: a reward model" in p.stderr
    assert {p: _sha(p) for p in kept} == kept
    mine = json.loads((out / "eval" / f"summary@{tag}.json").read_text())
    assert set(mine["eval"]) == {"base", "sft", "rl"} and mine["eval_protocol"]["samples_per_task"] == 1
    # another task file under the same name would mix two protocols in one file: refused before any work
    other = tmp_path / "b" / "heldout.jsonl"
    other.parent.mkdir()
    shutil.copy(out / "tasks" / "eval.jsonl", other)
    before = _sha(out / "eval" / f"summary@{tag}.json")
    assert "another protocol" in _refused(capsys, "eval", "--run", str(out), "--tasks", str(other), "--limit", "3",
                                          "--max-new-tokens", "6")
    assert _sha(out / "eval" / f"summary@{tag}.json") == before

    # a finished run resumed with a changed recipe is refused, naming the change
    changed = ["rl.steps=20" if word == "rl.steps=6" else word for word in SMALL]
    assert "rl.steps (6 -> 20)" in _refused(capsys, "run", str(TINY), "--out", str(out), "--resume", *changed)
    assert {p: _sha(p) for p in kept} == kept

    # a run that fails once work has started says how to start over (here: a corrupt RL checkpoint)
    step = json.loads((leftover / "checkpoints" / "rl-state" / "latest").read_text())["name"]
    (leftover / "checkpoints" / "rl-state" / step / "state.pt").write_bytes(b"garbage")
    p = _posttrain("run", str(TINY), "--out", str(leftover), "--resume", *SMALL)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr[-3000:]
    assert "state.pt" in p.stderr and "another --out" in p.stderr and f"remove {leftover}" in p.stderr


@pytest.mark.slow
def test_sigterm_then_quickstart_resume_finds_the_interrupted_run(tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / "quickstart").mkdir(parents=True)  # an older, unfinished quickstart with another recipe
    (runs / "quickstart" / "config.yaml").write_text("seed: 1\n")
    out = runs / "quickstart-2"
    code, err = _interrupt(["quickstart", *QS_TINY], out, signal.SIGTERM, group=False, cwd=tmp_path)
    assert code == 130
    command = _one_line_interrupt(err)
    assert command.startswith("posttrain quickstart --out runs/quickstart-2 --resume --set model.hidden_size=64")

    p = _posttrain("quickstart", "--resume", *QS_TINY, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "resuming runs/quickstart-2" in p.stderr
    assert _rl_steps(out) == list(range(6)) and (out / "summary.json").is_file()
    assert (runs / "quickstart" / "config.yaml").read_text() == "seed: 1\n"  # untouched

    assert "rl.no_such_key" in _refused(capsys, "quickstart", *QS_TINY, "--set", "rl.no_such_key=1", cwd=tmp_path)
    assert not (runs / "quickstart-3").exists()  # bad input: nothing created


@pytest.mark.slow
def test_a_second_process_in_a_running_run_directory_is_refused_and_writes_nothing(tmp_path, capsys):
    """Two posttrain processes in one run directory (a run started twice, a --resume while the run
    still goes, two quickstarts that picked one directory) wrote its config, checkpoints and records
    over each other's. The run holds its directory (a lock the kernel drops with the process): a second
    ``run`` or ``run --resume`` there is one line, exit 2, and the first run's files are untouched."""
    out = tmp_path / "run"
    proc = subprocess.Popen([*CLI, "run", str(TINY), "--out", str(out)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 300
        while not (out / "config.yaml").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before a second process could try its directory"
        before = _sha(out / "config.yaml")
        assert "another posttrain process is running in this run directory" in _refused(
            capsys, "run", str(TINY), "--out", str(out), "--resume")
        assert _sha(out / "config.yaml") == before
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=120)
