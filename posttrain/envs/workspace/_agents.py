"""Scripted agents: a policy written by hand, played through the same runner, tools and template as a model.

``ScriptedAgent(chat, tasks, name)`` is a ``posttrain.policy.Sampler``: given an episode's context
(token ids), it works out which task the episode is (its prompt), what it has done so far and what
the tools answered (the ids after each of its actions), and emits its next tool call as the chat
template writes one (``ChatTemplate.write_tool_calls``), followed by EOS, as token ids. Nothing
reaches the environment but those ids: the oracle, the no-op and every cheat are judged exactly as
a checkpoint or an endpoint would be (``posttrain eval --episodes agent --agent NAME``).

- A script is ``script(task) -> [call, ...]`` (``{"name", "arguments"}`` each); the agent plays its
  calls in order, one per action, then ``submit`` again for as long as the episode goes on.
- ``noop`` (the kit's): submit at once. A domain names its own (``HasScriptedAgents``): ``oracle``
  (solves each task through the tools from its reference), and cheats written as a policy would
  write them.
- Which task: the episode's prompt ids equal those of the task's ``WorkspaceSpec`` (rendered with
  the same template). Tasks whose prompts are the same (two bugs of one project that break the same
  tests) are told apart by what the tools answered: a domain's ``agent_probes(task)`` are calls and
  a text each one's result holds for that task (repo: reading the file its reference fixes shows
  the buggy lines). The agent makes a probe call only when the candidates' scripts disagree on the
  next call, and a call of its script that equals a probe counts as one.
- Deterministic: the same context gives the same action (``n`` samples of a task are one episode
  ``n`` times). ``logprobs`` are 0.0 (the script's choice is certain).

What it does not do: read observations beyond the probes (a script is fixed per task, so the
oracle's edits are the reference's, whatever the tools said), or stop before the episode ends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from posttrain.envs._registry import get_domain
from posttrain.envs.workspace._env import WorkspaceSpec, prompt_ids
from posttrain.errors import UserError
from posttrain.policy import ChatTemplate
from posttrain.types import Generation, Task

Call = Mapping[str, Any]
"""One tool call: ``{"name": str, "arguments": {...}}``."""
SUBMIT: Call = {"name": "submit", "arguments": {}}


class AgentScript(Protocol):
    """The calls a scripted agent makes on ``task``, in order (``submit`` last, or implied)."""

    def __call__(self, task: Task) -> Sequence[Call]: ...


@runtime_checkable
class HasWorkspaceEpisodes(Protocol):
    """A domain whose episodes run on the workspace kit: ``workspace_spec(task)`` (cheap: no
    workspace is made) is what its episode environment starts from."""

    def workspace_spec(self, task: Task) -> WorkspaceSpec: ...


@runtime_checkable
class HasScriptedAgents(Protocol):
    """A domain with scripted agents: ``scripted_agents()`` names its scripts (``oracle`` and its
    cheats); ``agent_probes(task)`` are ``(call, text)`` pairs whose results tell its tasks apart
    when their prompts are the same (module docstring)."""

    def scripted_agents(self) -> Mapping[str, AgentScript]: ...

    def agent_probes(self, task: Task) -> Sequence[tuple[Call, str]]: ...


def noop_script(task: Task) -> Sequence[Call]:
    """The no-op agent: submit at once, changing nothing."""
    return [SUBMIT]


def agent_names(tasks: Sequence[Task]) -> list[str]:
    """The scripted agents every task of ``tasks`` has: ``noop``, then those all their domains name."""
    common: set[str] | None = None
    for domain in {t.domain for t in tasks}:
        found = get_domain(domain)
        names = set(found.scripted_agents()) if isinstance(found, HasScriptedAgents) else set()
        common = names if common is None else common & names
    return ["noop", *sorted(common or ())]


def _key(call: Call) -> str:
    return json.dumps({"name": call["name"], "arguments": call.get("arguments") or {}}, sort_keys=True)


def _plain(text: str) -> str:
    """Text compared for probes: ASCII only (a tokenizer may not round-trip the rest), lines stripped."""
    return "\n".join(line.strip() for line in text.encode("ascii", "ignore").decode().splitlines())


@dataclass(frozen=True)
class _Play:
    """Where one episode is: the tasks it may be, and the calls made with what they answered."""

    candidates: tuple[int, ...]
    history: tuple[tuple[str, str], ...] = ()  # (call key, observation text) of every action so far
    played: int = 0  # calls of the script made so far


class ScriptedAgent:
    """A ``Sampler`` that plays ``name``'s script on each episode of ``tasks`` (module docstring).

    >>> # agent = ScriptedAgent(ChatTemplate(tokenizer), tasks, "oracle")
    >>> # trajs = run_batch(agent, episodes, SamplingParams(max_new_tokens=4096), max_turns=30)
    """

    def __init__(self, chat: ChatTemplate, tasks: Sequence[Task], name: str) -> None:
        self.chat, self.tasks, self.name = chat, list(tasks), name
        self.scripts: list[list[Call]] = []
        self.probes: list[list[tuple[str, str]]] = []
        self.prompts: dict[tuple[int, ...], list[int]] = {}
        for i, task in enumerate(self.tasks):
            domain = get_domain(task.domain)
            if not isinstance(domain, HasWorkspaceEpisodes):
                raise UserError(f"--agent {name}: task {task.id!r} is of domain {task.domain!r}, whose episodes are "
                                "not workspace episodes")
            if name == "noop":
                script = noop_script
            else:
                scripts = domain.scripted_agents() if isinstance(domain, HasScriptedAgents) else {}
                if name not in scripts:
                    raise UserError(f"--agent {name}: domain {task.domain!r} has no such agent (it has "
                                    f"{['noop', *sorted(scripts)]})")
                script = scripts[name]
            self.scripts.append([dict(c) for c in script(task)])
            probes = domain.agent_probes(task) if isinstance(domain, HasScriptedAgents) else ()
            self.probes.append([(_key(c), _plain(text)) for c, text in probes])
            ids = tuple(prompt_ids(chat, domain.workspace_spec(task)))
            self.prompts.setdefault(ids, []).append(i)
        self._lengths = sorted({len(p) for p in self.prompts}, reverse=True)
        # per prompt: {length of a context through an action: {hash of that context: the episode after it}}
        self._plays: dict[tuple[int, ...], dict[int, dict[int, _Play]]] = {}
        self._lock = threading.Lock()

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: Any) -> list[Generation]:
        return [self._one(tuple(p), params.max_new_tokens) for p in prompt_ids]

    def _one(self, context: tuple[int, ...], cap: int) -> Generation:
        prompt, play = self._where(context)
        call, play = self._next(play)
        text = self.chat.write_tool_calls([call])
        ids = (*self.chat.encode(text), self.chat.eos_token_id)
        stop = "eos"
        if len(ids) > cap:
            ids, stop = ids[:cap], "length"
        with self._lock:
            self._plays.setdefault(prompt, {}).setdefault(len(context) + len(ids), {})[hash(context + ids)] = play
        decoded = self.chat.tokenizer.decode(list(ids), skip_special_tokens=True)
        return Generation(context, ids, (0.0,) * len(ids), decoded, stop)  # type: ignore[arg-type]

    def _where(self, context: tuple[int, ...]) -> tuple[tuple[int, ...], _Play]:
        """The episode ``context`` continues: its prompt (the task's), and the longest context this
        agent acted on that it starts with, with the observation since (a new episode: none)."""
        prompt = next((context[:n] for n in self._lengths if n <= len(context) and context[:n] in self.prompts), None)
        if prompt is None:
            raise UserError(f"scripted agent {self.name!r}: an episode whose prompt is none of its tasks' "
                            f"({len(self.tasks)} tasks; was the agent built with the evaluated tasks?)")
        with self._lock:
            known = self._plays.get(prompt, {})
            found = next(((n, plays[h]) for n, plays in sorted(known.items(), reverse=True)
                          if n <= len(context) and (h := hash(context[:n])) in plays), None)
        if found is None:
            if len(context) != len(prompt):
                raise UserError(f"scripted agent {self.name!r}: a context that continues an episode it did not act in")
            return prompt, _Play(tuple(self.prompts[prompt]))
        n, play = found
        observation = _plain(self.chat.tokenizer.decode(list(context[n:]), skip_special_tokens=True))
        last = play.history[-1][0]
        return prompt, _Play(play.candidates, (*play.history[:-1], (last, observation)), play.played)

    def _next(self, play: _Play) -> tuple[Call, _Play]:
        """The next call, and the episode with it made (its observation filled in on the next call)."""
        said = dict(play.history)
        cands = tuple(c for c in play.candidates
                      if all(key not in said or text in said[key] for key, text in self.probes[c])) \
            or play.candidates[:1]
        wanted = {c: self._call(c, play.played) for c in cands}
        if len({_key(v) for v in wanted.values()}) > 1:
            probe = next((key for c in cands for key, _ in self.probes[c] if key not in said), None)
            if probe is not None:
                return json.loads(probe), _Play(cands, (*play.history, (probe, "")), play.played)
            cands = cands[:1]
        call = wanted[cands[0]]
        return call, _Play(cands, (*play.history, (_key(call), "")), play.played + 1)

    def _call(self, task_index: int, k: int) -> Call:
        script = self.scripts[task_index]
        return script[k] if k < len(script) else SUBMIT


@dataclass(frozen=True)
class ScriptedModel:
    """A scripted agent as ``posttrain eval`` samples a model (``sampler()``, ``tokenizer``,
    ``encode_prompt``; plain prompts, no chat of its own for repair turns): its episodes are
    rendered with ``tokenizer``'s chat template (default: the embedded default's, one token a
    character, so tokens per episode count characters).

    >>> # model = ScriptedModel.build("oracle", tasks)
    """

    agent: ScriptedAgent
    tokenizer: Any
    chat: None = None

    @staticmethod
    def build(name: str, tasks: Sequence[Task], tokenizer: Any = None) -> ScriptedModel:
        if tokenizer is None:
            from posttrain.policy import build_char_tokenizer

            tokenizer = build_char_tokenizer()
        return ScriptedModel(ScriptedAgent(ChatTemplate(tokenizer), tasks, name), tokenizer)

    def sampler(self) -> ScriptedAgent:
        return self.agent

    def encode_prompt(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])
