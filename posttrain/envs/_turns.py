"""``ChatTurns``: the conversation of one episode, kept once for every environment that renders it.

    turns = ChatTurns(chat, [{"role": "user", "content": prompt}], tools=tools)
    prompt_ids = turns.prompt_ids()                   # the template's rendering, generation prompt included
    turns.act(action, message)                        # the assistant message of an action (its ids as sampled)
    ids = turns.observe([tool_or_user_message, ...])  # what the runner appends after that action

The context of an episode is the prompt's ids, then each action's ids exactly as sampled (never
decoded and re-encoded), then each observation's ids. ``observe`` renders only what follows the
last action: ``ChatTemplate.observation_ids`` (the template's end of turn when the action did not
end with EOS, the new messages, the generation prompt), computed against the conversation so far,
so the context stays what the template renders for the whole conversation (reference/episodes.md,
"token-in/token-out append"). ``RepairEnv``, ``ToolEpisodeEnv``, ``BfclEnv`` and workspace agents
keep their turns here instead of each keeping a ``messages`` list.

Not here: what the messages say (the environment decides), parsing actions (``ChatTemplate.parse_tool_calls``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from posttrain.policy import ChatTemplate
from posttrain.types import Generation

Message = Mapping[str, Any]


class ChatTurns:
    """One episode's conversation through ``chat`` (module docstring).

    >>> from posttrain.policy import build_char_tokenizer
    >>> chat = ChatTemplate(build_char_tokenizer())
    >>> turns = ChatTurns(chat, [{"role": "user", "content": "2+2?"}])
    >>> turns.prompt_ids() == chat.render([{"role": "user", "content": "2+2?"}])
    True
    """

    def __init__(self, chat: ChatTemplate, messages: Sequence[Message], *,
                 tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        if not messages:
            raise ValueError("ChatTurns: an episode starts with at least one message")
        self.chat = chat
        self.messages: list[dict[str, Any]] = [dict(m) for m in messages]
        self.tools: list[Mapping[str, Any]] | None = list(tools) if tools else None
        self._action_ids: tuple[int, ...] | None = None  # of the action not yet followed by an observation

    def prompt_ids(self) -> list[int]:
        """The conversation so far rendered with the generation prompt (at reset: the prompt)."""
        return self.chat.render(self.messages, tools=self.tools)

    def act(self, action: Generation, message: Message | None = None) -> None:
        """The assistant turn of ``action``: ``message`` (``ChatTemplate.assistant_message`` of its
        parsed calls), or its text as the content. Its ids are what was sampled."""
        self.messages.append(dict(message) if message is not None else {"role": "assistant", "content": action.text})
        self._action_ids = tuple(action.completion_ids)

    def snapshot(self) -> tuple[int, tuple[int, ...] | None]:
        """The conversation's state now, for ``restore`` (a ``Restorable`` environment's snapshot)."""
        return len(self.messages), self._action_ids

    def restore(self, snapshot: tuple[int, tuple[int, ...] | None]) -> None:
        """Back to the state of ``snapshot`` (the messages after it dropped)."""
        n, self._action_ids = snapshot
        del self.messages[n:]

    def observe(self, new: Sequence[Message]) -> list[int]:
        """The ids that follow the last action so that the context renders ``messages + new`` with the
        generation prompt; ``new`` joins the conversation."""
        if self._action_ids is None:
            raise ValueError("ChatTurns.observe: no action to follow (act first, once per observation)")
        ids = self.chat.observation_ids(self.messages, self._action_ids, new, tools=self.tools)
        self.messages += [dict(m) for m in new]
        self._action_ids = None
        return ids
