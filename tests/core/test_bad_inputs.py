"""Every subcommand refuses bad input before any work: one line on stderr naming the key or path,
exit 2, no traceback, and no file created or changed (issue 12, section 3).

The table runs in-process through ``posttrain.cli.main`` (fast); a few cases run the real entry
point in a subprocess. Each case runs in a fresh workspace (the current directory, so default
outputs such as runs/quickstart would land in it) whose every file and folder is compared before
and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from posttrain.cli import main
from posttrain.train.recipe import EMBEDDED_RECIPE

MATH = {"id": "m1", "domain": "math", "prompt": "1+1?", "answer": "2", "reference": "\\boxed{2}"}
HUMANEVAL = {"task_id": "HumanEval/0", "prompt": "def f():\n", "entry_point": "f",
             "canonical_solution": "    return 1\n", "test": "def check(candidate):\n    assert candidate() == 1\n"}
RECIPE = str(EMBEDDED_RECIPE)


def _read_only_dir(root: Path) -> Path | None:
    """A directory no file can be created in: mode 555, or for root (who ignores modes) sysfs."""
    d = root / "ro"
    d.mkdir()
    d.chmod(0o555)
    try:
        with tempfile.TemporaryFile(dir=d):
            pass
    except OSError:
        return d
    return Path("/sys") if Path("/sys").is_dir() else None


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """The workspace: input files of every kind, and the current directory."""
    w = tmp_path / "ws"
    w.mkdir()
    (w / "good.jsonl").write_text(json.dumps(MATH) + "\n")
    (w / "he.jsonl").write_text(json.dumps(HUMANEVAL) + "\n")
    (w / "empty.jsonl").write_text("")
    (w / "badutf8.jsonl").write_bytes(json.dumps(MATH).encode() + b"\n" + b'{"id": "m\xff"}\n')
    (w / "afile").write_text("not a directory\n")
    (w / "resp.jsonl").write_text(json.dumps({"task_id": "m1", "response": "\\boxed{2}"}) + "\n")
    (w / "resp_empty.jsonl").write_text("\n")
    (w / "resp_bad.jsonl").write_text(json.dumps({"task_id": "m1", "response": 3}) + "\n")
    (w / "bad.yaml").write_text("rl:\n  steps: 10\n  clip_hihg: 0.3\n")
    (w / "run" / "eval").mkdir(parents=True)
    monkeypatch.chdir(w)
    ro = _read_only_dir(tmp_path)
    yield w, ro
    (tmp_path / "ro").chmod(0o755)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file and folder under ``root``: kind, size, mtime and content hash."""
    out: dict[str, tuple] = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
        out[str(p.relative_to(root))] = (p.is_dir(), st.st_size, st.st_mtime_ns, digest)
    return out


def assert_refused_in_one_line(capsys, root: Path, argv: list[str], needle: str) -> None:
    """``posttrain ARGV`` exits 2 with one stderr line holding ``needle``, no traceback, and nothing under
    ``root`` changed."""
    before = snapshot(root)
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err, err
    assert snapshot(root) == before


ISSUE_12_RECIPE_VALUES = [
    "rl.lr=-0.001", "rl.critic_lr=-1", "eval.max_new_tokens=0", "model.hidden_size=-64", "sft.pack_len=0",
    "eval.samples_per_task=0", "rl.clip_low=-1", "sandbox.workers=-1", "rl.gae_lambda=5", "rl.max_grad_norm=-1",
    "sft.warmup_frac=2", "reward.outcome=-1", "model.num_layers=0",
]

CASES = [
    # run: every recipe value of the issue, and unusable output directories
    *[pytest.param(["run", RECIPE, "--out", "out", "--set", v], v.split("=")[0] + ": expected", id=f"run-{v}")
      for v in ISSUE_12_RECIPE_VALUES],
    pytest.param(["run", RECIPE, "--out", "out", "--set", "model.device=cuda"], "model.device", id="run-cuda",
                 marks=pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")),
    pytest.param(["run", RECIPE, "--out", "out", "--set", "model.lora={target_modules: [c_attn]}"],
                 "model.lora.target_modules: LlamaForCausalLM (llama) has no module 'c_attn'", id="run-lora-targets"),
    pytest.param(["run", RECIPE, "--out", "afile"], "--out afile: exists and is not a directory", id="run-out-file"),
    pytest.param(["run", RECIPE, "--out", "afile/run"], "afile is a file", id="run-out-under-file"),
    pytest.param(["run", RECIPE, "--out", "{ro}/run"], "cannot write in {ro}", id="run-out-read-only"),
    pytest.param(["run", "missing.yaml", "--out", "out"], "missing.yaml: recipe file not found", id="run-no-recipe"),
    pytest.param(["run", "bad.yaml", "--out", "out"], "unknown key 'rl.clip_hihg'", id="run-unknown-key"),
    # quickstart: the default directory (runs/quickstart here) must not appear either
    pytest.param(["quickstart", "--set", "rl.lr=-1"], "rl.lr: expected a number in (0, 1]", id="quickstart-lr"),
    pytest.param(["quickstart", "--out", "afile"], "--out afile", id="quickstart-out-file"),
    # eval
    pytest.param(["eval", "--model", "/nonexistent", "--tasks", "good.jsonl"], "--model /nonexistent: no such model directory",
                 id="eval-no-model"),
    pytest.param(["eval", "--responses", "resp.jsonl", "--tasks", "good.jsonl", "--max-new-tokens", "0"],
                 "--max-new-tokens must be >= 1", id="eval-max-new-tokens"),
    pytest.param(["eval", "--responses", "resp.jsonl", "--tasks", "empty.jsonl"], "no tasks in empty.jsonl", id="eval-empty"),
    pytest.param(["eval", "--responses", "resp_empty.jsonl", "--tasks", "good.jsonl"], "no responses in resp_empty.jsonl",
                 id="eval-no-responses"),
    pytest.param(["eval", "--responses", "resp_bad.jsonl", "--tasks", "good.jsonl"], "resp_bad.jsonl:1: field 'response'",
                 id="eval-bad-response"),
    pytest.param(["eval", "--responses", "resp.jsonl", "--tasks", "good.jsonl", "--out", "afile"], "--out afile",
                 id="eval-out-file"),
    pytest.param(["eval", "--responses", "resp.jsonl", "--tasks", "he.jsonl"], "--domain code", id="eval-humaneval-no-domain"),
    pytest.param(["eval", "--responses", "resp.jsonl", "--tasks", "badutf8.jsonl"], "badutf8.jsonl:2: not UTF-8",
                 id="eval-bad-utf8"),
    pytest.param(["eval", "--n", "abc", "--responses", "resp.jsonl"], "argument --n: invalid int value", id="eval-argparse"),
    # verify
    pytest.param(["verify", "--tasks", "empty.jsonl", "--responses", "resp.jsonl"], "no tasks in empty.jsonl",
                 id="verify-empty"),
    pytest.param(["verify", "--tasks", "good.jsonl", "--responses", "resp_empty.jsonl"], "no responses in resp_empty.jsonl",
                 id="verify-no-responses"),
    pytest.param(["verify", "--tasks", "good.jsonl", "--responses", "resp_bad.jsonl"], "resp_bad.jsonl:1: field 'response'",
                 id="verify-bad-response"),
    pytest.param(["verify", "--task", "good.jsonl", "--response", "missing.txt"], "missing.txt: no such response file",
                 id="verify-no-response-file"),
    pytest.param(["verify", "--tasks", "good.jsonl", "--responses", "resp.jsonl", "--workers", "0"], "--workers",
                 id="verify-workers"),
    # tasks validate / decontaminate
    pytest.param(["tasks", "validate", "empty.jsonl"], "no tasks in empty.jsonl", id="validate-empty"),
    pytest.param(["tasks", "validate", "good.jsonl", "badutf8.jsonl"], "badutf8.jsonl:2: not UTF-8", id="validate-bad-utf8"),
    pytest.param(["tasks", "validate", "he.jsonl"], "--domain code", id="validate-humaneval-no-domain"),
    pytest.param(["tasks", "validate", "missing.jsonl"], "missing.jsonl: no such task file", id="validate-missing"),
    pytest.param(["tasks", "decontaminate", "empty.jsonl", "good.jsonl"], "no tasks in empty.jsonl", id="decontaminate-empty"),
    pytest.param(["tasks", "decontaminate", "good.jsonl", "good.jsonl", "--out", "afile"], "--out afile",
                 id="decontaminate-out-file"),
    # report / audit
    pytest.param(["report", "nodir"], "nodir: run directory not found", id="report-no-run"),
    pytest.param(["report", "run", "--out", "run"], "--out run: is a directory", id="report-out-dir"),
    pytest.param(["report", "run", "--out", "afile/r.html"], "afile is a file", id="report-out-under-file"),
    pytest.param(["audit", "nodir"], "nodir: run directory not found", id="audit-no-run"),
    pytest.param(["audit", "run", "--sample", "0"], "--sample must be >= 1", id="audit-sample"),
    # sandbox run / bench
    pytest.param(["sandbox", "run", "--timeout", "-1", "--", "true"], "--timeout", id="sandbox-timeout"),
    pytest.param(["sandbox", "run", "--memory-mb", "0", "--", "true"], "--memory-mb", id="sandbox-memory"),
    pytest.param(["sandbox", "run", "--workspace", "afile", "--", "true"], "--workspace 'afile'", id="sandbox-workspace"),
    pytest.param(["sandbox", "run"], "no command given", id="sandbox-no-command"),
    pytest.param(["bench", "nope"], "invalid choice: 'nope'", id="bench-unknown"),
]


def _fill(words: list[str], ro: Path | None) -> list[str]:
    if any("{ro}" in w for w in words) and ro is None:
        pytest.skip("no read-only directory on this machine")
    return [w.replace("{ro}", str(ro)) for w in words]


@pytest.mark.parametrize(("argv", "needle"), CASES)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(ws, capsys, argv, needle):
    root, ro = ws
    assert_refused_in_one_line(capsys, root, _fill(argv, ro), _fill([needle], ro)[0])


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", RECIPE, "--out", "out", "--set", "rl.lr=-0.001"], "rl.lr: expected a number in (0, 1], got -0.001"),
        (["eval", "--model", "/nonexistent", "--tasks", "good.jsonl"], "no such model directory"),
        (["tasks", "validate", "empty.jsonl"], "no tasks in empty.jsonl"),
        (["bench", "nope"], "invalid choice: 'nope'"),
    ],
    ids=["run", "eval", "validate", "bench"],
)
def test_the_real_entry_point(ws, argv, needle):
    root, _ = ws
    before = snapshot(root)
    p = subprocess.run([sys.executable, "-m", "posttrain.cli", *argv], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert needle in p.stderr
    assert snapshot(root) == before


def test_unanswered_tasks_are_a_warning(ws, capsys):
    """Not an error: the responses that exist are scored; the rest are named on stderr."""
    from posttrain.tasks import warn_unanswered

    warn_unanswered(["a", "b", "c", "d", "e"], {"a"}, "r.jsonl")
    err = capsys.readouterr().err
    assert err == "posttrain: warning: r.jsonl has no response for 4 task(s) ('b', 'c', 'd', ...); they are not scored\n"
