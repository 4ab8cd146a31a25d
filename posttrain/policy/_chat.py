"""Chat templates: messages to token ids with the tokenizer's own template, observations appended as
ids after sampled actions, and tool calls parsed in the format the template teaches.

Why: a chat model is trained on its template; a prompt rendered any other way is off-distribution,
and a multi-turn context must be the template's rendering of the conversation, built without ever
decoding and re-encoding what the model sampled (../shared/reference/episodes.md §2-3).

    chat = ChatTemplate(policy.tokenizer)                        # family detected from the template
    chat.check_appends("tool", tools=tools)                      # refuse a rewriting template up front
    context = chat.render(messages, tools=tools)                 # ids, with the generation prompt
    [g] = sampler.generate([context], params)
    parse = chat.parse_tool_calls(g.text)                        # calls, or an error with its reason
    messages.append(chat.assistant_message(parse))
    context += [*g.completion_ids, *chat.observation_ids(messages, g.completion_ids, results, tools=tools)]
    messages += results                                          # tool_result_message(...) each

How an observation is built (``observation_ids``): the template renders the conversation through
the model's assistant turn (``before``) and with the new messages and the generation prompt
(``after``); the observation is the text that closes the assistant turn (what the template writes
after an assistant message's content: Qwen's ``<|im_end|>\\n``) followed by ``after[len(before):]``,
encoded as one piece. When the action ended with the sampler's EOS, the closing text must start with
it (else ``ChatTemplateError``: a base model's ``<|endoftext|>`` is not Qwen's ``<|im_end|>``), and it
is not repeated; an action cut by a stop string or by length gets the whole closing text (an
appended, masked end-of-turn). The context then equals
``render(messages + new, add_generation_prompt=True)`` whenever the sampled ids are the template's
own rendering of the action (the tests check it on a Qwen2-style model); when they are not (a
different spacing of the JSON, a token split the tokenizer would not make), the sampled ids stay
as sampled: the trainer scores what was sampled.

Templates that rewrite history (Qwen3 drops ``<think>`` blocks before the last user message): then
``before`` is not a prefix of ``after`` and ``observation_ids`` raises ``ChatTemplateError`` naming
the check, unless the ``ChatTemplate`` was built with ``on_rewrite="append"``: the documented
fallback renders the new messages after a fixed user + assistant exchange and appends that delta,
so the context stays append-only (what the model sampled from is what it is trained on, as verl
and TRL keep full reasoning) but is no longer the template's rendering of the full conversation.

Tool-call families (``TOOL_FAMILIES``), detected from the template text, overridable: ``"hermes"``
(Hermes/Qwen ``<tool_call>{"name", "arguments"}</tool_call>`` blocks) and ``"openai"`` (one JSON
document: ``{"name", "arguments"}``, a list of them, or an OpenAI message ``{"tool_calls": [...]}``;
``arguments`` an object or a JSON string). Decoding is the tool-call codec's (``_toolcalls.py``:
``parse_tool_calls(text, family)``): a response in the other family's format is an error result,
never zero calls (NeMo-RL #3422).

Not here: Qwen3-Coder XML (``<function=...>``), Mistral ``[TOOL_CALLS]``, GPT-OSS ``<|call|>``
formats (detected and refused by name); running tools; which messages an environment sends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from posttrain.errors import UserError
from posttrain.policy._toolcalls import (
    TOOL_FAMILIES,
    ToolCallParse,
    ToolFamily,
    parse_tool_calls,
    tool_result_message,
)
from posttrain.strict_json import to_plain

OnRewrite = Literal["error", "append"]
Message = Mapping[str, Any]

_SENTINEL = "PTsentinel7q"  # assistant content used to find what the template writes around a turn
_TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>")  # what parsing reads in an action's text
_UNSUPPORTED = {  # template text -> the format it teaches, which this module does not parse
    "<function=": "Qwen3-Coder XML calls (<function=...>)",
    "[TOOL_CALLS]": "Mistral [TOOL_CALLS]",
    "<|call|>": "GPT-OSS harmony calls (<|call|>)",
}


class ChatTemplateError(UserError):
    """The tokenizer's chat template cannot do what was asked (none, unsupported, rewrites history)."""


@dataclass
class ChatTemplate:
    """A tokenizer's chat template: rendering, append-only observations, the tool-call family.

    ``family``: None detects it from the template text (``detect_family``); ``on_rewrite``: what
    ``observation_ids`` does with a template that rewrites earlier turns (module docstring).

    >>> from posttrain.policy import build_char_tokenizer
    >>> chat = ChatTemplate(build_char_tokenizer())
    >>> chat.family, chat.render([{"role": "user", "content": "2+2?"}]) == build_char_tokenizer()("2+2?")["input_ids"]
    ('hermes', True)
    """

    tokenizer: Any
    family: ToolFamily | None = None
    on_rewrite: OnRewrite = "error"
    template: str = field(init=False, repr=False)
    eos_token_id: int | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        template = getattr(self.tokenizer, "chat_template", None)
        if not isinstance(template, str) or not template:
            raise ChatTemplateError(
                f"{getattr(self.tokenizer, 'name_or_path', '') or 'the tokenizer'}: no chat template "
                "(chat_template.jinja or tokenizer_config.json chat_template); set tokenizer.chat_template")
        if self.family is None:
            self.family = detect_family(template)
        elif self.family not in TOOL_FAMILIES:
            raise ChatTemplateError(f"chat template: family must be one of {list(TOOL_FAMILIES)}, got {self.family!r}")
        if self.on_rewrite not in ("error", "append"):
            raise ChatTemplateError(f"chat template: on_rewrite must be 'error' or 'append', got {self.on_rewrite!r}")
        self.template = template
        self.eos_token_id = self.tokenizer.eos_token_id

    def render_text(self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None,
                    add_generation_prompt: bool = True) -> str:
        """The template's text for ``messages`` (and ``tools``), as ``apply_chat_template`` writes it.
        A template that fails on them (``raise_exception``, a missing field, or a Python error of its
        expressions: DeepSeek-V3's adds a string to a call's arguments given as an object, a ``TypeError``)
        is a ``ChatTemplateError``, one line, not a traceback."""
        from jinja2 import TemplateError

        try:
            return self.tokenizer.apply_chat_template(
                [dict(m) for m in messages], tools=list(tools) if tools else None, tokenize=False,
                add_generation_prompt=add_generation_prompt)
        except (TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            roles = [m.get("role") for m in messages]
            raise ChatTemplateError(f"chat template of {self._name()} failed on messages with roles {roles}: "
                                    f"{type(e).__name__}: {e}") from None

    def render(self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None,
               add_generation_prompt: bool = True) -> list[int]:
        """``apply_chat_template(messages, tools=tools, add_generation_prompt=...)`` as token ids."""
        return self.encode(self.render_text(messages, tools=tools, add_generation_prompt=add_generation_prompt))

    def encode(self, text: str) -> list[int]:
        """Template text to ids as ``apply_chat_template`` tokenizes it (no special tokens added)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def observation_ids(self, messages: Sequence[Message], action_ids: Sequence[int], new: Sequence[Message], *,
                        tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
        """Ids to append after ``action_ids`` so that the context continues as the template renders
        ``messages + new`` with the generation prompt (module docstring).

        ``messages``: the conversation through the assistant message of this action (its last
        message); ``action_ids``: what was sampled for it (only its last id is read: EOS or not);
        ``new``: the messages that follow (tool results, user feedback).
        """
        if not messages or messages[-1].get("role") != "assistant":
            raise ValueError("observation_ids: messages must end with the assistant message of the action")
        if not new:
            raise ValueError("observation_ids: no new message to append")
        close = self._close_text(messages[:-1], tools)
        head = self.render_text(messages[:-1], tools=tools, add_generation_prompt=True)
        before = self.render_text(messages, tools=tools, add_generation_prompt=False)
        after = self.render_text([*messages, *new], tools=tools, add_generation_prompt=True)
        problem = _append_problem(head, before, after, close)
        if problem is None:
            text = close + after[len(before):]
        elif self.on_rewrite == "error":
            raise ChatTemplateError(f"chat template of {self._name()}: {problem}; the context cannot stay the "
                                    "template's rendering. Use ChatTemplate(..., on_rewrite='append') to append "
                                    "observations to what was sampled anyway")
        else:
            text = close + self._delta_after_assistant(new, tools)
        ids = self.encode(text)
        if action_ids and action_ids[-1] == self.eos_token_id:
            if ids[:1] != [self.eos_token_id]:
                raise ChatTemplateError(
                    f"{self._name()}: sampling stops at EOS {self.tokenizer.eos_token!r} but the chat template ends "
                    f"an assistant turn with {close!r}; set the tokenizer's eos_token to the template's end of turn")
            ids = ids[1:]  # the sampled EOS is the template's end of turn: in the context already
        return ids

    def check_end_of_turn(self) -> None:
        """Raise ``ChatTemplateError`` unless the tokenizer's EOS is how the template ends an assistant
        turn (what its closing text starts with), so that a completion or SFT response ending with
        EOS is a whole assistant turn: Qwen-Instruct's ``<|im_end|>`` passes, a base model's
        ``<|endoftext|>`` under Qwen's template does not.

        >>> from posttrain.policy import build_char_tokenizer
        >>> ChatTemplate(build_char_tokenizer()).check_end_of_turn()
        """
        close = self._close_text([{"role": "user", "content": "q"}], None)
        if self.encode(close)[:1] != [self.eos_token_id]:
            raise ChatTemplateError(
                f"{self._name()}: sampling stops at EOS {self.tokenizer.eos_token!r} but the chat template ends "
                f"an assistant turn with {close!r}; set the tokenizer's eos_token to the template's end of turn")

    def parse_tool_calls(self, text: str) -> ToolCallParse:
        """The tool calls of a response, in this template's family (``parse_tool_calls``)."""
        return parse_tool_calls(text, self.family)

    def check_appends(self, role: Literal["user", "tool"], *, tools: Sequence[Mapping[str, Any]] | None = None
                      ) -> None:
        """Raise ``ChatTemplateError`` now, before any work, where ``observation_ids`` would raise in
        an episode whose observations are ``role`` messages ("user": repair feedback; "tool": tool
        results). Probe: a question, an answer (a call, for "tool") in each shape a policy may give
        it -- after a ``<think>`` block, with no block, with an empty one --, then one ``role`` message;
        and its tags must survive the samplers' decode (not special tokens: ``_check_read_as_written``).

        The shape is the policy's: real Qwen3 renders a last assistant turn with no reasoning as
        ``<think>\\n\\n</think>\\n\\n`` + content, and the same turn before a tool result as content
        alone, so a template probed only with reasoning passed here and then raised mid-episode, at
        the first answer without it (a ``StepError`` out of the runner: the run ended)."""
        call = ('<tool_call>{"name": "f", "arguments": {}}</tool_call>' if self.family == "hermes" else
                '{"name": "f", "arguments": {}}')
        body = "4" if role == "user" else call
        new = {"role": "user", "content": "f"} if role == "user" else tool_result_message("r", tool_call_id="call_0")
        for reasoning in ("<think>\nr\n</think>\n\n", "", "<think>\n\n</think>\n\n"):
            answer = reasoning + body
            self._check_read_as_written(answer)
            messages = [{"role": "user", "content": "q"}, self.assistant_message(self.parse_tool_calls(answer))]
            self.observation_ids(messages, [*self.encode(answer), self.eos_token_id], [new], tools=tools)

    def _check_read_as_written(self, answer: str) -> None:
        """Raise ``ChatTemplateError`` when the reasoning or call tags of ``answer`` are special tokens of
        the tokenizer: every sampler gives an action's text decoded with ``skip_special_tokens=True``,
        so a right ``<tool_call>`` read as bare JSON was an unreadable call in an episode (0 reward) while
        the one-turn verifier, family-blind, passed the same text; a special ``<think>`` left the
        reasoning in the answer (vLLM's hermes parser turns ``skip_special_tokens`` off for such models)."""
        seen = self.tokenizer.decode(self.encode(answer), skip_special_tokens=True)
        lost = [tag for tag in _TAGS if tag in answer and tag not in seen]
        if lost:
            raise ChatTemplateError(
                f"{self._name()}: the tokenizer marks {lost} as special tokens, and an action's text is decoded "
                "without special tokens, so a response's reasoning and calls would not be read as written; "
                "register them as added tokens that are not special")

    def write_tool_calls(self, calls: Sequence[Mapping[str, Any]]) -> str:
        """Calls ``{"name", "arguments"}`` written as this template's family writes them (the inverse
        of ``parse_tool_calls``): Hermes ``<tool_call>`` blocks, or one OpenAI JSON list.

        >>> from posttrain.policy import build_char_tokenizer
        >>> ChatTemplate(build_char_tokenizer()).write_tool_calls([{"name": "f", "arguments": {"x": 1}}])
        '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
        """
        plain = [{"name": c["name"], "arguments": dict(c.get("arguments") or {})} for c in calls]
        if self.family == "hermes":
            return "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in plain)
        return json.dumps(plain)

    @staticmethod
    def assistant_message(parse: ToolCallParse) -> dict[str, Any]:
        """The assistant message of a parsed response, for rendering: content + OpenAI ``tool_calls``
        with ``arguments`` as a dict (what templates iterate over; OpenAI sends a JSON string).
        A response whose calls do not parse is its text, as written."""
        if not parse.ok:
            return {"role": "assistant", "content": parse.text}
        msg: dict[str, Any] = {"role": "assistant", "content": parse.content}
        if parse.calls:
            msg["tool_calls"] = [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": c.name, "arguments": to_plain(dict(c.arguments))}}
                for i, c in enumerate(parse.calls)]
        return msg

    def _name(self) -> str:
        return getattr(self.tokenizer, "name_or_path", "") or type(self.tokenizer).__name__

    def _close_text(self, history: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None) -> str:
        """What the template writes after an assistant message's content (Qwen: ``<|im_end|>\\n``)."""
        text = self.render_text([*history, {"role": "assistant", "content": _SENTINEL}], tools=tools,
                                add_generation_prompt=False)
        at = text.rfind(_SENTINEL)
        if at < 0:
            raise ChatTemplateError(f"chat template of {self._name()}: an assistant message's content does not "
                                    "appear in its rendering; cannot tell where a turn ends")
        return text[at + len(_SENTINEL):]

    def _delta_after_assistant(self, new: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None) -> str:
        """The fallback delta: ``new`` rendered after a fixed user + assistant exchange, found by the
        assistant's content (independent of how the template rewrites that turn's header): its first
        occurrence, since ``new`` may hold the sentinel too (a tool result that quotes the policy's
        call, ``unknown tool 'PTsentinel7q'``: found last, it raised mid-episode)."""
        base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _SENTINEL}]
        text = self.render_text([*base, *new], tools=tools, add_generation_prompt=True)
        close = self._close_text(base[:1], tools)
        at = text.find(_SENTINEL)
        if at < 0 or not text[at + len(_SENTINEL):].startswith(close):
            raise ChatTemplateError(f"chat template of {self._name()}: cannot render new messages after an "
                                    "assistant turn as an appended delta")
        return text[at + len(_SENTINEL) + len(close):]


def _append_problem(head: str, before: str, after: str, close: str) -> str | None:
    """Why appending to ``before`` does not give ``after`` (``head``: the prompt of the action), or None."""
    if not after.startswith(before):
        return ("it renders the conversation with the new messages differently from the conversation so far "
                "(it rewrites earlier turns, e.g. drops <think> blocks)")
    if not before.startswith(head):
        return "an assistant turn does not start with the generation prompt"
    if not before.endswith(close):
        return f"this assistant message does not end with the turn's closing text {close!r}"
    return None


def has_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` carries a chat template (``tokenizer.chat_template``, a non-empty string).

    >>> from posttrain.policy import build_char_tokenizer
    >>> has_chat_template(build_char_tokenizer())
    True
    """
    template = getattr(tokenizer, "chat_template", None)
    return isinstance(template, str) and bool(template)


def prompt_template(tokenizer: Any) -> ChatTemplate:
    """The tokenizer's ``ChatTemplate`` for prompts and user turns (chat-rendered prompts, repair
    feedback): the tool-call family is not read there, so a template that teaches a call format
    posttrain does not parse (Qwen3-Coder XML, ...) is accepted, as the JSON family."""
    template = getattr(tokenizer, "chat_template", None)
    try:
        family = detect_family(template) if isinstance(template, str) else None
    except ChatTemplateError:
        family = "openai"
    return ChatTemplate(tokenizer, family=family)


def detect_family(template: str) -> ToolFamily:
    """The tool-call family a chat template teaches: ``"hermes"`` when it writes ``<tool_call>``
    blocks, else ``"openai"`` (JSON calls). Formats this module cannot parse raise ``ChatTemplateError``.

    >>> detect_family("{% for t in tools %}{{ t | tojson }}{% endfor %}<tool_call>")
    'hermes'
    >>> detect_family("{{ messages[0]['content'] }}")
    'openai'
    """
    for marker, what in _UNSUPPORTED.items():
        if marker in template:
            raise ChatTemplateError(f"chat template teaches {what}, which posttrain does not parse; pass "
                                    f"family= one of {list(TOOL_FAMILIES)} if the model writes one of those")
    return "hermes" if "<tool_call>" in template else "openai"
