"""RL step checkpoints (``rl-state/step-N/model``, which ``posttrain eval --model`` accepts) record
how the run's prompts were rendered (posttrain.json), as the stage checkpoints do: a step checkpoint
of a chat run loads chat-rendered, one of a plain run plain. Real model (a 1-layer Llama over a
character tokenizer with a Qwen2-style template), real math verifier through the service."""

import json
import sys
from pathlib import Path

import pytest

from posttrain.envs import get_domain
from posttrain.policy import CHAT_RECORD, load_policy
from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service
from posttrain.train.checkpoint import load_latest
from posttrain.train.grpo import train_grpo
from posttrain.train.recipe import RLConfig
from posttrain.types import Task
from posttrain.verify.rewards import RewardWeights

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "policy"))
from _chat_models import qwen_char_tokenizer  # noqa: E402
from test_chat_prompts import tiny_llama_dir  # noqa: E402

TASKS = [Task(id=f"m{i}", domain="math", prompt=f"{i}+1?", fields={"answer": str(i + 1)}) for i in range(2)]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tiny_llama_dir(tmp_path_factory.mktemp("chat") / "model", qwen_char_tokenizer())


@pytest.mark.parametrize("chat", [True, False])
def test_a_step_checkpoint_records_the_prompt_rendering(tmp_path, model, chat):
    policy = load_policy(model, chat=chat)
    cfg = RLConfig(steps=1, prompts_per_step=2, group_size=2, max_new_tokens=4, checkpoint_every=1)
    hooks = {"math": DomainHooks(get_domain("math").make_verifier(None))}
    with Service(LocalBackend(hooks), SchedPolicy(max_tries=2, backoff_s=0.01)) as svc:
        train_grpo(policy, TASKS, svc, cfg, reward_weights=RewardWeights(), out=tmp_path / "run", seed=0)
    step = load_latest(tmp_path / "run" / "checkpoints" / "rl-state").path / "model"
    assert json.loads((step / CHAT_RECORD).read_text()) == {"chat": chat}
    loaded = load_policy(step)  # as posttrain eval --model loads it: the record decides
    assert (loaded.chat is not None) is chat
    assert loaded.encode_prompt("0+1?") == policy.encode_prompt("0+1?")
