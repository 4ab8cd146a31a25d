"""Chat templates: rendering with the tokenizer's template, observations appended as ids after what
was sampled, tool calls parsed by template family.

The pitfalls of ../shared/reference/episodes.md §3, one test each: the end-of-turn token after a
stop (Qwen's ``<|im_end|>\\n``: the newline inserted, the EOS not repeated; a stop-string action
gets the whole end of turn), templates that rewrite earlier turns (Qwen3 drops <think> before the
last user message), a generation prompt that is not the assistant header, no repeated BOS, sampled
ids never re-tokenized, dict arguments for templates, the parser matching the template family.
"""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _chat_models import (  # noqa: E402
    QWEN2_TEMPLATE,
    QWEN3_THINK_TEMPLATE,
    qwen_bpe_tokenizer,
    qwen_char_tokenizer,
    tiny_qwen2,
)

from posttrain.errors import UserError  # noqa: E402
from posttrain.policy import (  # noqa: E402
    ChatTemplate,
    ChatTemplateError,
    LocalSampler,
    SamplingParams,
    build_char_tokenizer,
    build_embedded_default,
    detect_family,
    load_policy,
    parse_tool_calls,
    tool_result_message,
)
from posttrain.types import Observation, StepResult, Task, Verdict  # noqa: E402  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
USER = {"role": "user", "content": "Weather in Oslo?"}
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
RESULT = tool_result_message({"temp": 3}, tool_call_id="call_0")


@pytest.fixture(scope="module", params=["char", "bpe"])
def qwen(request):
    """The Qwen2-style template over a character tokenizer, and over a byte-level BPE trained on
    these conversations (merges across "\n\n", " Oslo", ...: the seams of episodes.md §3)."""
    if request.param == "char":
        return ChatTemplate(qwen_char_tokenizer())
    chat = ChatTemplate(qwen_char_tokenizer())
    call = call_message(chat, CALL_TEXT + "\n" + CALL_TEXT.replace("Oslo", "Lima"))
    corpus = [chat.render_text([USER, call, RESULT, {"role": "tool", "content": "\n\ncold"},
                                {"role": "assistant", "content": "It is 3."}, {"role": "user", "content": "Try again."}],
                               tools=TOOLS)]
    return ChatTemplate(qwen_bpe_tokenizer(corpus * 4))


def call_message(chat: ChatTemplate, text: str = CALL_TEXT) -> dict:
    parse = chat.parse_tool_calls(text)
    assert parse.ok, parse.error
    return chat.assistant_message(parse)


# --- rendering -------------------------------------------------------------------------------------

def test_render_is_apply_chat_template_with_tools(qwen):
    tok = qwen.tokenizer
    ids = qwen.render([USER], tools=TOOLS)
    assert ids == tok.apply_chat_template([USER], tools=TOOLS, add_generation_prompt=True, return_dict=False)
    text = tok.decode(ids)
    assert '"name": "get_weather"' in text and text.endswith("<|im_start|>assistant\n")
    assert qwen.render([USER], add_generation_prompt=False) == tok.apply_chat_template([USER], return_dict=False)


def test_no_chat_template_is_a_user_error():
    tok = qwen_char_tokenizer()
    tok.chat_template = None
    with pytest.raises(UserError, match="no chat template"):
        ChatTemplate(tok)


def test_a_template_that_raises_is_one_user_error_line():
    tok = qwen_char_tokenizer("{% if messages[-1].role == 'tool' %}{{ raise_exception('no tool role') }}{% endif %}x")
    with pytest.raises(ChatTemplateError, match=r"roles \['user', 'tool'\]: TemplateError: no tool role"):
        ChatTemplate(tok).render([USER, RESULT])


# --- observations ----------------------------------------------------------------------------------

def test_tool_result_after_eos_continues_the_templates_rendering(qwen):
    """The action stopped at EOS = <|im_end|>: the observation adds the newline after it (not the EOS
    again), the tool result and the generation prompt; the context is the template's rendering."""
    tok = qwen.tokenizer
    prompt = qwen.render([USER], tools=TOOLS)
    action = [*qwen.encode(CALL_TEXT), tok.eos_token_id]
    messages = [USER, call_message(qwen)]
    obs = qwen.observation_ids(messages, action, [RESULT], tools=TOOLS)
    assert tok.decode(obs[:1]) == "\n" and tok.eos_token_id not in obs[:1]
    assert tok.decode(obs).endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert prompt + action + obs == qwen.render([*messages, RESULT], tools=TOOLS)


def test_two_tool_results_and_a_user_turn_are_exact(qwen):
    """Qwen renders consecutive tool results in one user turn; a user feedback turn is its own."""
    tok = qwen.tokenizer
    two_calls = CALL_TEXT + "\n" + CALL_TEXT.replace("Oslo", "Lima")
    messages = [USER, call_message(qwen, two_calls)]
    new = [RESULT, tool_result_message("\n\ncold", tool_call_id="call_1")]  # content starting with newlines
    action = [*qwen.encode(two_calls), tok.eos_token_id]
    context = qwen.render([USER], tools=TOOLS) + action + qwen.observation_ids(messages, action, new, tools=TOOLS)
    assert context == qwen.render([*messages, *new], tools=TOOLS)
    assert tok.decode(context).count("<|im_start|>user") == 2
    feedback = {"role": "user", "content": "Try again."}
    messages += [*new, {"role": "assistant", "content": "It is 3."}]
    action = [*qwen.encode("It is 3."), tok.eos_token_id]
    context += action + qwen.observation_ids(messages, action, [feedback], tools=TOOLS)
    assert context == qwen.render([*messages, feedback], tools=TOOLS)


def test_stop_string_action_gets_the_whole_end_of_turn(qwen):
    """Cut by the stop string "</tool_call>" (no EOS sampled): <|im_end|> is appended, as ids."""
    tok = qwen.tokenizer
    action = qwen.encode(CALL_TEXT)
    assert action[-1] != tok.eos_token_id
    messages = [USER, call_message(qwen)]
    obs = qwen.observation_ids(messages, action, [RESULT], tools=TOOLS)
    assert obs[:2] == [tok.eos_token_id, *qwen.encode("\n")]
    assert qwen.render([USER], tools=TOOLS) + action + obs == qwen.render([*messages, RESULT], tools=TOOLS)


def test_an_eos_that_is_not_the_templates_end_of_turn_is_an_error():
    """A base model's tokenizer stops at <|endoftext|>; the template closes a turn with <|im_end|>."""
    tok = qwen_char_tokenizer()
    tok.eos_token = "<|endoftext|>"
    chat = ChatTemplate(tok)
    with pytest.raises(ChatTemplateError, match=r"stops at EOS '<\|endoftext\|>'.*'<\|im_end\|>\\n'"):
        chat.check_appends("tool", tools=TOOLS)


def test_sampled_ids_are_never_re_tokenized(qwen):
    """The model spelled "<tool_call>" in characters: decoding and re-encoding gives other ids (the
    added token). The observation is the same; the context keeps the ids as sampled."""
    tok = qwen.tokenizer
    spelled = [tok.convert_tokens_to_ids(c) for c in "<tool_call>"] + qwen.encode(CALL_TEXT)[1:]
    action = [*spelled, tok.eos_token_id]
    canonical = [*qwen.encode(CALL_TEXT), tok.eos_token_id]
    assert tok.decode(action) == tok.decode(canonical) and action != canonical
    assert qwen.encode(tok.decode(action)) == canonical  # what re-tokenizing would have trained on
    messages = [USER, call_message(qwen, tok.decode(spelled))]
    obs = qwen.observation_ids(messages, action, [RESULT], tools=TOOLS)
    assert obs == qwen.observation_ids(messages, canonical, [RESULT], tools=TOOLS)
    context = qwen.render([USER], tools=TOOLS) + action + obs
    assert context[len(qwen.render([USER], tools=TOOLS)):][: len(action)] == action


def test_template_that_drops_earlier_thinking_is_an_error_or_the_documented_fallback():
    """Qwen3-style: a new user turn strips the earlier <think> block, so the rendering of the
    conversation so far is not a prefix of the next one."""
    chat = ChatTemplate(qwen_char_tokenizer(QWEN3_THINK_TEMPLATE))
    tok = chat.tokenizer
    answer = "<think>\nmaybe 4\n</think>\n\n4"
    messages = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": answer}]
    action = [*chat.encode(answer), tok.eos_token_id]
    feedback = {"role": "user", "content": "Wrong."}
    with pytest.raises(ChatTemplateError, match="rewrites earlier turns.*on_rewrite='append'"):
        chat.observation_ids(messages, action, [feedback])
    # a tool result is not a user query: Qwen3 keeps the block, the context stays the rendering
    obs = chat.observation_ids(messages, action, [RESULT])
    assert chat.render(messages[:1]) + action + obs == chat.render([*messages, RESULT])
    # the fallback: append-only, the delta after an assistant turn
    append = ChatTemplate(tok, on_rewrite="append")
    obs = append.observation_ids(messages, action, [feedback])
    assert tok.decode(obs) == "\n<|im_start|>user\nWrong.<|im_end|>\n<|im_start|>assistant\n"
    context = chat.render(messages[:1]) + action + obs
    assert "maybe 4" in tok.decode(context) and context != chat.render([*messages, feedback])


def test_check_appends_refuses_a_rewriting_template_before_any_work(qwen):
    qwen3 = ChatTemplate(qwen_char_tokenizer(QWEN3_THINK_TEMPLATE))
    with pytest.raises(ChatTemplateError, match="rewrites earlier turns"):
        qwen3.check_appends("user")
    qwen3.check_appends("tool")
    ChatTemplate(qwen3.tokenizer, on_rewrite="append").check_appends("user")
    for role in ("user", "tool"):
        qwen.check_appends(role, tools=TOOLS)
        ChatTemplate(build_char_tokenizer()).check_appends(role, tools=TOOLS)


def test_generation_prompt_that_is_not_the_assistant_header_is_an_error():
    template = QWEN2_TEMPLATE.replace("{{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n",
                                      "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' }}\n{%- endif %}\n")
    assert template != QWEN2_TEMPLATE
    chat = ChatTemplate(qwen_char_tokenizer(template))
    messages = [USER, {"role": "assistant", "content": "Sunny."}]
    with pytest.raises(ChatTemplateError, match="generation prompt"):
        chat.observation_ids(messages, [*chat.encode("Sunny."), chat.eos_token_id], [RESULT])


# --- the embedded default ----------------------------------------------------------------------------

PLAIN = "Solve: 2+2?\n"
PLAIN_IDS = [1, 58, 28, 25, 35, 18, 81, 98, 6, 76, 6, 86, 100]  # build_char_tokenizer() before it had a template


def test_embedded_default_has_a_template_and_plain_prompts_keep_their_ids(tmp_path):
    tok = build_char_tokenizer()
    assert len(tok) == 101 and tok(PLAIN)["input_ids"] == PLAIN_IDS
    policy = load_policy(build_embedded_default(tmp_path / "m"))
    assert policy.tokenizer.chat_template and policy.encode_prompt(PLAIN) == PLAIN_IDS
    chat = ChatTemplate(policy.tokenizer)
    assert chat.family == "hermes"
    # a one-turn chat is exactly the plain prompt
    assert chat.render([{"role": "user", "content": PLAIN}]) == PLAIN_IDS
    # multi-turn: EOS closes a turn, nothing repeated, no second BOS, the context is the rendering
    eos, bos = tok.eos_token_id, tok.bos_token_id
    messages = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "5"}]
    action = [*chat.encode("5"), eos]
    obs = chat.observation_ids(messages, action, [{"role": "user", "content": "Wrong."}])
    assert bos not in obs and eos not in obs
    assert chat.render(messages[:1]) + action + obs == chat.render([*messages, {"role": "user", "content": "Wrong."}])
    # tools and a tool call through the template
    msg = call_message(chat, '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>')
    action = [*chat.encode('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'), eos]
    context = chat.render([USER], tools=TOOLS) + action
    context += chat.observation_ids([USER, msg], action, [RESULT], tools=TOOLS)
    assert context == chat.render([USER, msg, RESULT], tools=TOOLS)
    assert tok.unk_token_id not in context


# --- tool-call parsing by family ---------------------------------------------------------------------

LLAMA_LIKE = ("{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}Respond with JSON "
              '{"name": function name, "arguments": dict}{% for t in tools %}{{ t | tojson }}{% endfor %}{% endif %}')


def test_family_is_detected_from_the_template_and_overridable():
    assert detect_family(QWEN2_TEMPLATE) == "hermes"
    assert detect_family(LLAMA_LIKE) == "openai"
    with pytest.raises(ChatTemplateError, match="Qwen3-Coder"):
        detect_family("<tool_call>\n<function={{ name }}>")
    tok = qwen_char_tokenizer()
    assert ChatTemplate(tok, family="openai").family == "openai"
    with pytest.raises(ChatTemplateError, match="family must be one of"):
        ChatTemplate(tok, family="xml")


def test_hermes_parses_blocks_and_keeps_the_text_around_them():
    parse = parse_tool_calls("Let me check.\n" + CALL_TEXT + "\n" + CALL_TEXT.replace("Oslo", "Lima"), "hermes")
    assert parse.ok and [c.arguments["city"] for c in parse.calls] == ["Oslo", "Lima"]
    assert parse.content == "Let me check."
    assert parse_tool_calls("It is sunny.", "hermes") == parse_tool_calls("It is sunny.", "openai")
    assert parse_tool_calls("It is sunny.", "hermes").calls == () and parse_tool_calls("It is sunny.", "hermes").ok


def test_openai_parses_json_calls_and_string_arguments():
    message = '{"tool_calls": [{"id": "c1", "type": "function", "function": ' \
              '{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}}]}'
    parse = parse_tool_calls(message, "openai")
    assert parse.ok and parse.calls[0].name == "get_weather" and parse.calls[0].arguments == {"city": "Oslo"}
    assert parse_tool_calls('{"name": "get_weather", "arguments": {"city": "Oslo"}}', "openai").ok
    # a JSON string of arguments becomes a dict in the message the template renders
    msg = ChatTemplate.assistant_message(parse)
    assert msg["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}
    chat = ChatTemplate(qwen_char_tokenizer())
    assert '"arguments": {"city": "Oslo"}' in chat.render_text([USER, msg])


@pytest.mark.parametrize(("family", "text", "reason"), [
    ("hermes", '{"name": "get_weather", "arguments": {"city": "Oslo"}}', "OpenAI JSON, but this template's"),
    ("openai", CALL_TEXT, "<tool_call> block, but this template's calls are OpenAI JSON"),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}</tool_call>', "invalid JSON"),
    ("hermes", '<tool_call>{"name": "get_weather"}', "looks like a tool call"),
    ("openai", '{"name": "get_weather", "arguments": {"city": "Oslo"', "invalid JSON"),
    ("openai", '{"name": "get_weather", "arguments": "{city: Oslo}"}', "arguments string"),
])
def test_a_format_mismatch_or_malformed_call_is_an_error_not_zero_calls(family, text, reason):
    parse = parse_tool_calls(text, family)
    assert not parse.ok and parse.calls == () and reason in parse.error
    # the turn is rendered as the model wrote it
    assert ChatTemplate.assistant_message(parse) == {"role": "assistant", "content": text}


# --- end to end: a tiny Qwen2 model with the Qwen2-style template --------------------------------------

def overfit(model, ids: list[int], targets: list[tuple[int, int]], *, max_steps: int = 300) -> int:
    """Train ``model`` on ``ids`` (loss on the ``[start, end)`` spans) until greedy decoding
    reproduces every target token; returns the steps taken."""
    x = torch.tensor([ids])
    labels = torch.full_like(x, -100)
    for start, end in targets:
        labels[0, start:end] = x[0, start:end]
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sel = labels[0, 1:] >= 0
    for step in range(max_steps):
        out = model(input_ids=x, labels=labels)
        if (out.logits[0, :-1].argmax(-1)[sel] == x[0, 1:][sel]).all():
            return step
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    raise AssertionError(f"the tiny model did not learn the demonstration in {max_steps} steps")


ANSWER = {"role": "assistant", "content": "It is 3 C in Oslo."}


@pytest.fixture(scope="module")
def trained_qwen2():
    """A tiny Qwen2 that learned one demonstration episode: call get_weather, read the result, answer."""
    chat = ChatTemplate(qwen_char_tokenizer())
    demo = [USER, call_message(chat), RESULT, ANSWER]
    ids = chat.render(demo, tools=TOOLS, add_generation_prompt=False)[:-1]  # through the last <|im_end|>
    turn1 = (len(chat.render(demo[:1], tools=TOOLS)),
             len(chat.render(demo[:2], tools=TOOLS, add_generation_prompt=False)) - 1)
    turn2 = (len(chat.render(demo[:3], tools=TOOLS)), len(ids))
    model = tiny_qwen2(chat.tokenizer)
    overfit(model, ids, [turn1, turn2])
    return chat, model


@pytest.mark.slow
def test_tiny_qwen2_calls_a_tool_and_the_context_is_the_templates_rendering(trained_qwen2):
    """Render with tools, sample with the LocalSampler, parse the call, append the tool result as
    observation ids, sample the answer: the context is the template's rendering of the conversation."""
    chat, model = trained_qwen2
    tok = chat.tokenizer
    assert chat.family == "hermes"
    chat.check_appends("tool", tools=TOOLS)
    sampler, params = LocalSampler(model, tok), SamplingParams(temperature=0, max_new_tokens=96)
    context = chat.render([USER], tools=TOOLS)
    [g] = sampler.generate([context], params)
    assert g.stop_reason == "eos" and g.completion_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    parse = chat.parse_tool_calls(g.text)
    assert parse.ok and [(c.name, dict(c.arguments)) for c in parse.calls] == [("get_weather", {"city": "Oslo"})]
    messages = [USER, chat.assistant_message(parse)]
    context += [*g.completion_ids, *chat.observation_ids(messages, g.completion_ids, [RESULT], tools=TOOLS)]
    assert context == chat.render([*messages, RESULT], tools=TOOLS)

    [g2] = sampler.generate([context], params)
    assert g2.text == ANSWER["content"] and chat.parse_tool_calls(g2.text).calls == ()
    context += g2.completion_ids
    assert context == chat.render([*messages, RESULT, ANSWER], tools=TOOLS, add_generation_prompt=False)[:-1]


class WeatherEnv:
    """A tool-calling ``posttrain.rollout.Env`` over a chat template: the prompt and every tool result
    are rendered by the template; a response without a call is the final answer."""

    def __init__(self, chat: ChatTemplate):
        self.chat, self.messages = chat, []

    def reset(self, task):
        self.messages = [{"role": "user", "content": task.prompt}]
        return Observation(tuple(self.chat.render(self.messages, tools=TOOLS)))

    def step(self, action):
        parse = self.chat.parse_tool_calls(action.text)
        self.messages.append(self.chat.assistant_message(parse))
        if not parse.ok or not parse.calls:
            verdict = Verdict("pass", 1.0) if parse.ok and "3 C" in parse.content else Verdict("fail", 0.0)
            return StepResult(Observation(()), verdict, True)
        results = [tool_result_message({"temp": 3}, tool_call_id=f"call_{i}") for i in range(len(parse.calls))]
        ids = self.chat.observation_ids(self.messages, action.completion_ids, results, tools=TOOLS)
        self.messages += results
        return StepResult(Observation(tuple(ids)), None, False)

    def close(self):
        pass


@pytest.mark.slow
def test_an_episode_through_the_runner_is_the_templates_rendering_and_trains_on_actions_only(trained_qwen2):
    """The same episode through ``run_episode``: the trajectory's ids are the template's rendering;
    the newline after <|im_end|>, the tool result and the generation prompt are observation tokens
    (loss mask 0, logprob 0.0); the sampled <|im_end|> is an action token."""
    from posttrain.rollout import Episode, run_episode

    chat, model = trained_qwen2
    env = WeatherEnv(chat)
    task = Task(id="w1", domain="test", prompt=USER["content"], fields={})
    traj = run_episode(LocalSampler(model, chat.tokenizer), Episode(task, env, "g0"),
                       SamplingParams(temperature=0, max_new_tokens=96), max_turns=3)
    assert [t.verdict for t in traj.turns] == [None, Verdict("pass", 1.0)] and traj.reward == 1.0
    assert list(traj.ids) == chat.render(env.messages, tools=TOOLS, add_generation_prompt=False)[:-1]
    im_end = chat.tokenizer.convert_tokens_to_ids("<|im_end|>")
    first_obs = len(traj.turns[0].observation_ids) + len(traj.turns[0].action_ids)
    assert traj.ids[first_obs - 1] == im_end and traj.loss_mask[first_obs - 1] == 1
    inserted = traj.turns[1].observation_ids
    assert chat.tokenizer.decode(inserted).startswith("\n<|im_start|>user\n<tool_response>")
    assert traj.loss_mask[first_obs:first_obs + len(inserted)] == (0,) * len(inserted)
    assert traj.logprobs[first_obs:first_obs + len(inserted)] == (0.0,) * len(inserted)
