"""Tool-calling episodes on the tool domain (``ToolEpisodeEnv``) with the embedded default's chat template.

Actions are the template's own rendering of a response plus the sampler's EOS (what a model that
learned the template samples), so the episode's context must equal the template's rendering of the
whole conversation; every call and result is in the verdict's evidence.
"""

from __future__ import annotations

import json

import pytest

from posttrain.envs import get_domain
from posttrain.envs.tool import ToolEpisodeEnv
from posttrain.policy import ChatTemplate, Generation, build_char_tokenizer

TOOL = get_domain("tool")
TASK = TOOL.parse_task({
    "id": "weather", "domain": "tool", "prompt": "Weather in Paris, celsius?",
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"},
                                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}],
    "expected_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]}, "test")
RIGHT = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}</tool_call>'
WRONG_VALUE = '<tool_call>{"name": "get_weather", "arguments": {"city": "Lima", "unit": "celsius"}}</tool_call>'
UNKNOWN = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
BAD_ARGS = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "kelvin"}}</tool_call>'
MALFORMED = '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>'


@pytest.fixture(scope="module")
def chat():
    return ChatTemplate(build_char_tokenizer())


def act(chat: ChatTemplate, text: str) -> Generation:
    ids = (*chat.encode(text), chat.eos_token_id)
    return Generation(prompt_ids=(), completion_ids=ids, logprobs=(0.0,) * len(ids), text=text, stop_reason="eos")


def run(chat: ChatTemplate, texts: list[str], *, max_steps: int = 8):
    env = ToolEpisodeEnv(chat, max_steps=max_steps)
    context = list(env.reset(TASK).ids)
    out = []
    for text in texts:
        g = act(chat, text)
        r = env.step(g)
        obs, verdict, done = r.observation, r.verdict, r.done
        context += [*g.completion_ids, *obs.ids]
        out.append((obs, verdict, done))
        if done:
            break
    return env, context, out


def test_recovers_from_bad_calls_and_records_every_call(chat):
    env, context, steps = run(chat, [MALFORMED, f"{UNKNOWN}{BAD_ARGS}", RIGHT, "It is sunny."])
    assert [s[2] for s in steps] == [False, False, False, True]
    assert [s[1] is None for s in steps] == [True, True, True, False]
    verdict = steps[-1][1]
    assert verdict.passed and verdict.evidence["ended"] == "answer"
    # 1 unreadable response + 3 calls, of which 1 valid: validity 1/4
    assert verdict.evidence["tool_calls"] == {"total": 4, "valid": 1} and verdict.evidence["invalid_actions"] == 1
    calls = verdict.evidence["calls"]
    assert [(c["step"], c["name"], c["valid"]) for c in calls] == [
        (2, "get_time", False), (2, "get_weather", False), (3, "get_weather", True)]
    assert "unknown tool 'get_time'" in json.loads(calls[0]["result"])["error"]
    assert json.loads(calls[2]["result"]) == {"status": "ok", "tool": "get_weather"}
    assert "could not be read" in steps[0][0].text
    # observations appended as ids: the context is the template's rendering of the conversation
    assert context == chat.render(env.turns.messages, tools=TASK.fields["tools"], add_generation_prompt=False)


def test_wrong_value_fails_and_invalid_calls_do_not_count_against_the_match(chat):
    _, _, steps = run(chat, [WRONG_VALUE, "Done."])
    assert not steps[-1][1].passed and steps[-1][1].error_class == "wrong_answer"
    assert steps[-1][1].evidence["tool_calls"] == {"total": 1, "valid": 1}
    _, _, steps = run(chat, [BAD_ARGS, RIGHT, "Done."])
    assert steps[-1][1].passed and steps[-1][1].evidence["tool_calls"] == {"total": 2, "valid": 1}
    _, _, steps = run(chat, ["No tools needed."])  # a final answer with no call: the expected call is missing
    assert not steps[-1][1].passed and steps[-1][1].evidence["tool_calls"] == {"total": 0, "valid": 0}


def test_step_limit_judges_the_calls_made_like_the_single_turn_verifier(chat):
    single = TOOL.make_verifier(None)
    for text in (RIGHT, WRONG_VALUE):
        _, _, steps = run(chat, [text], max_steps=1)
        obs, verdict, done = steps[0]
        assert done and obs.ids == () and verdict.evidence["ended"] == "step_limit"
        assert verdict.passed == single(TASK, text).passed
    _, _, steps = run(chat, [RIGHT, RIGHT], max_steps=2)  # the same call twice: two calls, one expected
    assert not steps[-1][1].passed and "expected 1 call(s), got 2" in steps[-1][1].feedback


def test_demonstration_episode_is_the_reference_as_an_episode(chat):
    from posttrain.policy import Policy
    from posttrain.rollout.episodes import agent_script, make_episodes, play_scripts

    def plan(task, steps):
        return make_episodes("agent", [task], Policy(None, chat.tokenizer), service=None, verify=TOOL.make_verifier(None),
                             max_turns=steps)

    [traj] = play_scripts(plan, [TASK], {TASK.id: agent_script(chat, TASK)}, None)
    assert len(traj.turns) == 2 and traj.verdicts[-1].passed  # the calls, then the final answer after their results
    (prompt, calls), (results, answer) = [(t.observation_ids, t.action_ids) for t in traj.turns]
    assert prompt == tuple(chat.render([{"role": "user", "content": TASK.prompt}], tools=TASK.fields["tools"]))
    assert chat.tokenizer.decode(list(calls), skip_special_tokens=True) == RIGHT
    assert '{"status": "ok", "tool": "get_weather"}' in chat.tokenizer.decode(list(results))
    assert answer == (*chat.encode("Done."), chat.eos_token_id)


ABSTAIN = TOOL.parse_task({**{k: v for k, v in json.loads(json.dumps({
    "id": "abstain", "domain": "tool", "prompt": "Tell me a joke.", "tools": TASK.fields["tools"]})).items()},
    "expected_calls": []}, "test")


def test_an_abstention_episode_counts_every_call_attempted_against_it(chat):
    """Issue 26 item 7: an abstention task (``expected_calls: []``) passed an episode after three
    invalid calls (they never ran, so they did not count). Now any call attempted fails it, and the
    episode must end with a final answer that says something."""
    def episode(texts):
        env = ToolEpisodeEnv(chat, max_steps=8)
        env.reset(ABSTAIN)
        for text in texts:
            r = env.step(act(chat, text))
            if r.done:
                return r.verdict
        raise AssertionError("the episode did not end")

    assert episode(["No tool tells jokes, so here is none."]).passed
    for texts in ([BAD_ARGS, UNKNOWN, MALFORMED, "No tool tells jokes."], [RIGHT, "Done."], [""]):
        v = episode(texts)
        assert v.outcome == "fail" and v.error_class in ("wrong_answer", "no_answer"), (texts, v)
    three_invalid = episode([BAD_ARGS, UNKNOWN, MALFORMED, "No tool tells jokes."])
    assert three_invalid.evidence["tool_calls"] == {"total": 3, "valid": 0}


def test_an_abstention_task_demonstrates_as_a_final_answer_alone(chat):
    from posttrain.rollout.episodes import FINAL_ANSWER, agent_script

    script = agent_script(chat, ABSTAIN)  # what SFT's demonstration of an agent episode plays
    assert [text for _, text in script] == [FINAL_ANSWER]


def _deep_call(depth: int) -> str:
    return ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "x": '
            + "[" * depth + "]" * depth + "}}</tool_call>")


@pytest.mark.parametrize("depth", [150, 600, 950])
def test_a_deeply_nested_argument_is_an_unreadable_call_never_an_exception(chat, depth: int):
    """An argument nested 500-980 deep decoded (Python's parser reads ~1,000 levels), then raised
    RecursionError out of ``step`` in the first recursive walk of it (the assistant message's
    ``to_plain``): the runner takes that for a bug of the environment and ends the whole batch, so
    one sampled response cost every other episode. It is a call that cannot be read, like any
    other; the episode goes on and the right call still passes."""
    env, _, steps = run(chat, [_deep_call(depth), RIGHT, "Done."])
    assert "could not be read" in steps[0][0].text and not steps[0][2]
    verdict = steps[-1][1]
    assert verdict.passed and verdict.evidence["invalid_actions"] == 1, verdict


@pytest.mark.parametrize("text", ["[]", "\u200b", "."])
def test_an_abstention_episode_is_not_passed_by_the_no_op_in_disguise(chat, text: str):
    """An empty call document, an invisible or a punctuation-only final answer says nothing (AGENT-01)."""
    env = ToolEpisodeEnv(chat, max_steps=4)
    env.reset(ABSTAIN)
    r = env.step(act(chat, text))
    assert r.done and (r.verdict.outcome, r.verdict.error_class) == ("fail", "no_answer"), r.verdict
