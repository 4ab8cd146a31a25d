"""A fourth read of the tool and json verifiers as a reward-hacking policy would read them.

Held (300 generated tasks of each domain, seed 11, and the shipped ones; see tests/envs/
test_tool_json_attacks2.py and test_rg_tool_json_attacks3.py for the forms pinned there): several
documents, a decoy beside one fence, comments, duplicate keys, key case, ``true`` for an integer,
NaN, 1e999, 5,000-digit and 1e-999999999 numbers, an array for the object, every tool called,
candidate lists as values, lookalike names: each fails (never ``infra_error``).

Found, and pinned here:

- an abstention task passed by reasoning with no answer after it: a template that opens
  ``<think>`` in the prompt (DeepSeek-R1, Qwen3 thinking) samples ``reasoning</think>`` and
  stops; no ``<think>`` opened the block, so the reasoning was read as the answer. ``</think>``
  alone passed too (its tag's letters), and ``{"content": "</think>", "tool_calls": []}``.
  301/301 abstention tasks before, 0 after;
- a json number equal to the expected one only once rounded to floats (``1e-400`` for ``0``,
  ``0.10000000000000001`` for ``0.1``, an integer past 2**53 off by one) earned ``format`` credit,
  as an honest wrong answer does; the tool domain gives it none (class 11, an attack).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from posttrain.envs import get_domain
from posttrain.envs.json._env import check_json
from posttrain.envs.tool import ToolEpisodeEnv
from posttrain.envs.tool._calls import check_tool_calls
from posttrain.policy import ChatTemplate, Generation, build_char_tokenizer

TOOL, JSON = get_domain("tool"), get_domain("json")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def _shipped(env: Any, name: str) -> list[Any]:
    path = EXAMPLES / name
    return [env.parse_task(json.loads(line), str(path)) for line in path.read_text().splitlines() if line.strip()]


SHIPPED_TOOL = _shipped(TOOL, "tool.jsonl")
ABSTAIN = [t for t in SHIPPED_TOOL if not t.fields["expected_calls"]] + [
    TOOL.parse_task({"id": f"abstain-{i}", "domain": "tool", "prompt": "Tell me a joke.", "tools": t.fields["tools"],
                     "expected_calls": []}, "test") for i, t in enumerate(TOOL.generate_tasks(20, seed=11))]


def _tool_verdict(task: Any, response: str) -> Any:
    f = task.fields
    return check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], response)


@pytest.mark.parametrize(("response", "why"), [
    ("</think>", "no_answer"), ("No tool fits this request.\n</think>\n\n", "no_answer"),
    ('{"content": "</think>", "tool_calls": []}', "no_answer"),  # a document, read whole: its content says nothing
    ('{"content": "<think>No tool fits.</think>", "tool_calls": []}', "no_answer")])
def test_reasoning_with_no_answer_after_it_fails_every_abstention_task(response: str, why: str) -> None:
    verdicts = [_tool_verdict(t, response) for t in ABSTAIN]
    assert all((v.outcome, v.error_class) == ("fail", why) and not v.components.get("format") for v in verdicts), [
        (t.id, v.error_class) for t, v in zip(ABSTAIN, verdicts, strict=True) if v.passed]


@pytest.mark.parametrize("response", ["No tool fits.</think>\nNone of these tools can tell a joke.",
                                      "<think>r</think>No tool fits.", "No tool fits.",
                                      'r</think>```json\n{"content": "No tool fits.", "tool_calls": []}\n```'])
def test_an_answer_after_the_reasoning_still_passes_an_abstention_task(response: str) -> None:
    assert all(_tool_verdict(t, response).passed for t in ABSTAIN)
    assert all(_tool_verdict(t, t.reference).passed for t in ABSTAIN if t.reference)


def test_an_abstention_episode_ending_in_reasoning_alone_says_nothing() -> None:
    chat = ChatTemplate(build_char_tokenizer())
    text = "None of the tools fits, so I will not call one.</think>"
    ids = (*chat.encode(text), chat.eos_token_id)
    env = ToolEpisodeEnv(chat, max_steps=2)
    env.reset(ABSTAIN[0])
    r = env.step(Generation(prompt_ids=(), completion_ids=ids, logprobs=(0.0,) * len(ids), text=text,
                            stop_reason="eos"))
    assert r.done and (r.verdict.outcome, r.verdict.error_class) == ("fail", "no_answer"), r.verdict


_NUMBERS = {"type": "object", "properties": {"level": {"type": "number"}, "count": {"type": "integer"}},
            "required": ["level", "count"], "additionalProperties": False}
_LOSSY = [  # (expected, a response equal to it only once rounded to floats)
    ({"level": 0, "count": 3}, '{"level": 1e-400, "count": 3}'),
    ({"level": 0.1, "count": 3}, '{"level": 0.10000000000000001, "count": 3}'),
    ({"level": 2.5, "count": 3}, '{"level": 2.5000000000000000001, "count": 3}'),
    ({"level": 1, "count": 2 ** 60}, f'{{"level": 1, "count": {2 ** 60 + 1}}}'),
]


@pytest.mark.parametrize(("expected", "response"), _LOSSY)
def test_a_json_number_equal_only_once_rounded_earns_no_format_credit(expected: dict, response: str) -> None:
    v = check_json(_NUMBERS, expected, response)
    assert (v.outcome, v.error_class, v.components["format"]) == ("fail", "lossy_number", 0.0), v
    assert check_json(_NUMBERS, expected, json.dumps(expected)).passed
    honest_wrong = check_json(_NUMBERS, expected, json.dumps({**expected, "level": 9.75}))
    assert (honest_wrong.error_class, honest_wrong.components["format"]) == ("wrong_answer", 1.0)


def test_the_json_exploit_fixtures_of_class_11_earn_no_format_credit() -> None:
    fixtures = [(n, t, r) for n, t, r in JSON.exploit_fixtures() if n.startswith("class 11")]
    for name, task, response in fixtures:
        v = check_json(task.fields["schema"], task.fields["expected"], response)
        assert (v.outcome, v.components["format"]) == ("fail", 0.0), (name, v)


def test_every_shipped_and_generated_reference_still_passes() -> None:
    tools = SHIPPED_TOOL + TOOL.generate_tasks(60, seed=11)
    assert all(_tool_verdict(t, t.reference).passed for t in tools)
    for t in _shipped(JSON, "json.jsonl") + JSON.generate_tasks(60, seed=11):
        assert check_json(t.fields["schema"], t.fields["expected"], t.reference).passed, t.id
