"""An environment's own error during episodes (``sched.StepError``) at the command line: one line
naming the task, the environment, the step and the exception, exit 1 (it was a traceback through
the runner's threads); ``POSTTRAIN_TRACEBACK=1`` shows the traceback for the plugin's author. The
environment is a plugin domain installed the way pip leaves one (entry point), whose tool episodes'
``step`` raises ``KeyError``; the model is a real one-layer Llama saved to disk."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "tests" / "envs" / "plugin" / "reverse_domain.py"

STEPBUG = '''
import dataclasses

from reverse_domain import ReverseEnv
from posttrain.types import Observation


class BuggyEpisode:
    def __init__(self, chat):
        self.chat = chat

    def reset(self, task):
        return Observation(tuple(self.chat.render([{"role": "user", "content": task.prompt}])), task.prompt)

    def step(self, action):
        return {}["state"]  # the plugin's bug: a KeyError at its first step

    def close(self):
        pass


class StepBugEnv(ReverseEnv):
    name = "stepbug"

    def parse_task(self, record, source):
        task = super().parse_task({**record, "domain": "reverse"}, source)
        return dataclasses.replace(task, domain="stepbug")

    def episode_env(self, task, ctx):
        return BuggyEpisode(ctx.chat)


ENV = StepBugEnv()
'''


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from posttrain.policy import build_char_tokenizer

    root = tmp_path_factory.mktemp("stepbug")
    site = root / "site"
    site.mkdir()
    (site / "reverse_domain.py").write_text(PLUGIN.read_text())
    (site / "stepbug_domain.py").write_text(STEPBUG)
    info = site / "stepbug_domain-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: stepbug-domain\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[posttrain.domains]\nstepbug = stepbug_domain:ENV\n")
    tok = build_char_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    (root / "t.jsonl").write_text(json.dumps({"id": "sb-1", "domain": "stepbug", "prompt": "Reverse the word.",
                                              "word": "abc"}) + "\n")
    return root, {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}


def _eval(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", "eval", "--model", str(root / "model"), "--tasks",
                           str(root / "t.jsonl"), "--episodes", "agent", "--max-turns", "2", "--max-new-tokens", "2"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_an_error_of_a_plugin_environment_is_one_line_exit_1(setup) -> None:
    root, env = setup
    out = _eval(root, env)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith("posttrain: error: task 'sb-1' (domain 'stepbug'"), out.stderr[-3000:]
    assert "environment BuggyEpisode, step 0: KeyError: 'state'" in line and "POSTTRAIN_TRACEBACK=1" in line


@pytest.mark.slow
def test_posttrain_traceback_shows_the_plugin_frame(setup) -> None:
    root, env = setup
    out = _eval(root, {**env, "POSTTRAIN_TRACEBACK": "1"})
    assert out.returncode == 1 and "Traceback" in out.stderr, out.stderr[-3000:]
    assert 'return {}["state"]' in out.stderr and "stepbug_domain.py" in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("posttrain: error: task 'sb-1'")
