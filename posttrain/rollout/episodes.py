"""Episodes built in one place: an episode kind becomes environments, turn limits and checks.

    plan = make_episodes("repair", tasks, model, service=service, verify=verify)
    runs = plan.episodes(tasks, group_ids, n)                 # one fresh environment each
    trajs = run_batch(sampler, runs, params, max_turns=plan.max_turns, max_tokens=plan.max_tokens, service=service)

The kinds (``EpisodeKind``; a recipe's ``rl.episodes`` / ``eval.episodes``, ``posttrain eval --episodes``):

- ``single``: one answer, its verdict (``SingleTurnEnv``: a ``Verify`` job of the service);
- ``repair``: attempts until one passes, the verifier's feedback between them, up to each task's
  ``limits.max_attempts`` (the repair kit's ``RepairEnv``; prompts and feedback through the
  prompts' chat template when they are chat-rendered);
- ``agent``: each task's domain builds its own environment (``HasEpisodes.episode_env(task, ctx)``:
  tool calling, BFCL, a workspace agent), given an ``EpisodeContext`` (the model's chat template,
  the sandbox pool, the step limit, the verifier through the service). ``tool`` is its former name,
  still accepted (one deprecation line) for one release.

Every caller takes the same objects: RL (``train.grpo.EpisodeSpec``), SFT's scripted demonstrations
(``play_scripts``), the pipeline's evaluation and ``posttrain eval`` (``evaluate.sources``), the
recipe's checks (``episode_turns``, ``episode_tokens``, ``tasks_problem``, ``chat_problem``) and
the audit (``is_episode_record``). The kind is read here and nowhere else: one table per question
(``_TURNS``, ``_MAKERS``, ``_ROLES``).

Not here: the runner itself (``_runner.py``), credit across turns (the trainer's ``EpisodeSpec``),
records (``posttrain.evaluate.records``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from posttrain.envs import (
    Env,
    EpisodeContext,
    HasDemonstrationSteps,
    HasEpisodeActions,
    HasEpisodes,
    RepairEnv,
    VerdictCache,
    domain_names,
    get_domain,
    is_registered,
)
from posttrain.envs.workspace import MAX_STEPS
from posttrain.errors import TaskError, UserError
from posttrain.policy import ChatTemplate, Sampler, SamplingParams, context_length
from posttrain.rollout._env import SingleTurnEnv
from posttrain.rollout._runner import Episode, run_batch
from posttrain.sched import Service
from posttrain.types import Generation, Task, Trajectory, Verifier

EpisodeKind = Literal["single", "repair", "agent"]
KINDS: tuple[EpisodeKind, ...] = ("single", "repair", "agent")
ALIASES: Mapping[str, EpisodeKind] = {"tool": "agent"}
"""Former names, accepted with a deprecation line for one release (``tool``: issue 20 renamed it)."""

MULTI_TURN: frozenset[EpisodeKind] = frozenset({"repair", "agent"})
"""The kinds whose episodes take more than one action (observations between them)."""

AGENT_STEPS = 4
"""The default step limit of an agent episode (``rl.max_turns``, ``eval.max_turns``, ``--max-turns``
set it): a tool task's actions; a BFCL task's steps with calls per user turn."""

OBSERVATION_TOKENS = 160
"""The position check's allowance for one observation of a multi-turn episode (repair feedback, tool
results); an episode's token budget (``rl.max_episode_tokens``) bounds them exactly."""

FINAL_ANSWER = "Done."
"""The scripted demonstrations' answer with no call (it ends an agent episode, or a BFCL user turn)."""


def episode_kind(name: str, *, where: str) -> EpisodeKind:
    """The kind named ``name``; a former name (``ALIASES``) is that kind, with one deprecation line on
    stderr naming ``where`` (the recipe key or the flag). Anything else is a ``ValueError``.

    >>> episode_kind("repair", where="rl.episodes")
    'repair'
    """
    if name in ALIASES:
        print(f"posttrain: warning: {where}: {name} is now called {ALIASES[name]} (accepted until the next "
              f"release)", file=sys.stderr)
        return ALIASES[name]
    if name not in KINDS:
        raise ValueError(f"{where}: expected one of {', '.join(KINDS)}, got {name!r}")
    return name  # type: ignore[return-value]  # checked against KINDS just above


class EpisodeModel(Protocol):
    """What building episodes needs of a model (``posttrain.policy.Policy``, an ``EndpointModel``)."""

    tokenizer: Any

    def encode_prompt(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class Episodes:
    """Episodes of one kind over some tasks: a fresh environment per episode and the runner's limits."""

    kind: EpisodeKind
    make_env: Callable[[Task, str, int], Env]
    """``(task, group id, sample index) -> Env``: a fresh environment for one episode."""
    restart: Callable[[Task], Env] | None
    """Another fresh environment to restart an episode after an infra error (``Episode.make_env``);
    None for single-turn episodes (their verification is a job the service retries itself)."""
    max_turns: int
    """The runner's cap on an episode's actions."""
    max_tokens: int | None = None
    """The episode's token budget after its prompt (None: none)."""
    max_context: int | None = None
    """The model's positions (``policy.context_length``): the most tokens an episode's context may hold
    (``run_batch``'s ``max_context``; None: the model does not say, an endpoint)."""

    def episodes(self, tasks: Sequence[Task], group_ids: Sequence[str], n: int, *, first: int = 0) -> list[Episode]:
        """``n`` episodes per task, task after task, each of group ``group_ids[k]`` of task k, their
        sample indices ``first`` .. ``first + n - 1``."""
        return [Episode(t, self.make_env(t, gid, i), gid, i, self.restart)
                for t, gid in zip(tasks, group_ids, strict=True) for i in range(first, first + n)]


def sample_tasks(plan: Episodes, sampler: Sampler, tasks: Sequence[Task], *, n: int, params: SamplingParams,
                 service: Service | None, stage: str) -> list[list[Trajectory]]:
    """``n`` episodes per task through the runner, ``out[task_index][sample_index]``: what evaluations
    and preference pairs sample. Each episode is a group of its own (``<stage>/<task id>/<i>``): an
    evaluation has no group-relative baseline, so an infra loss takes only its own sample. Round 0 is
    one ``generate`` call over every (task, sample) prompt in order, seeded with ``params.seed``."""
    runs = [ep for t in tasks for i in range(n) for ep in plan.episodes([t], [f"{stage}/{t.id}/{i}"], 1, first=i)]
    trajs = run_batch(sampler, runs, params, max_turns=plan.max_turns, max_tokens=plan.max_tokens, service=service,
                      max_context=plan.max_context)
    return [trajs[k * n : (k + 1) * n] for k in range(len(tasks))]


def make_episodes(
    kind: EpisodeKind,
    tasks: Sequence[Task],
    model: EpisodeModel,
    *,
    service: Service | None,
    verify: Verifier | None = None,
    prompt_chat: ChatTemplate | None = None,
    pool: Any | None = None,
    max_turns: int | None = None,
    max_attempts: int | None = None,
    max_tokens: int | None = None,
) -> Episodes:
    """Episodes of ``kind`` over ``tasks`` for ``model``.

    ``service``: single-turn answers are its ``Verify`` jobs, stateful steps its ``Step`` jobs (the
    runner restarts an episode on an infra error; without a service a repair episode retries a
    verification twice itself). ``verify``: what repair and agent environments verify with; default
    the service's nested lane (``Service.verifier``: each task's domain verifier, on any backend). ``prompt_chat``: the chat template the prompts are rendered with, or
    None for plain prompts (repair feedback follows the same). ``pool``: the sandbox pool agent
    environments run in. ``max_turns``: the step limit (single: 1; repair: at most this many
    attempts, default each task's ``limits.max_attempts``, ``max_attempts`` overriding those; agent:
    the ``EpisodeContext.max_steps``, default ``AGENT_STEPS``)."""
    if verify is None and service is not None:
        verify = service.verifier()
    if verify is None and kind in MULTI_TURN:
        raise ValueError(f"{kind} episodes verify inside their steps: make_episodes needs verify or a service")
    turns = episode_turns(kind, tasks, max_turns=max_turns, max_attempts=max_attempts)
    make, restart = _MAKERS[kind](model, service=service, verify=verify, prompt_chat=prompt_chat, pool=pool,
                                  max_steps=max_turns, max_attempts=max_attempts, max_tokens=max_tokens)
    return Episodes(kind, make, restart, turns, max_tokens, context_length(model))


Maker = Callable[..., tuple[Callable[[Task, str, int], Env], Callable[[Task], Env] | None]]


def _single(model: EpisodeModel, *, service: Service | None, **_: Any) -> tuple[Callable[[Task, str, int], Env], None]:
    if service is None:
        raise ValueError("single-turn episodes verify through the execution service: make_episodes needs one")

    def make(task: Task, group_id: str, i: int) -> Env:
        return SingleTurnEnv(service, model.encode_prompt, group_id=group_id, sample_idx=i)

    return make, None


def _repair(model: EpisodeModel, *, service: Service | None, verify: Verifier, prompt_chat: ChatTemplate | None,
            max_attempts: int | None, **_: Any) -> tuple[Callable[[Task, str, int], Env], Callable[[Task], Env]]:
    cache = VerdictCache()
    retries = 0 if service is not None else 2  # with a service the runner restarts the episode instead

    def encode_observation(text: str) -> list[int]:
        return list(model.tokenizer(text, add_special_tokens=False)["input_ids"])

    def restart(task: Task) -> Env:
        return RepairEnv(verify, model.encode_prompt, encode_observation, chat=prompt_chat, cache=cache,
                         max_attempts=max_attempts, infra_retries=retries)

    return (lambda task, group_id, i: restart(task)), restart


def _agent(model: EpisodeModel, *, verify: Verifier, pool: Any | None, max_steps: int | None,
           max_tokens: int | None, **_: Any) -> tuple[Callable[[Task, str, int], Env], Callable[[Task], Env]]:
    ctx = EpisodeContext(agent_chat(model.tokenizer), pool, max_steps or AGENT_STEPS, verify, max_tokens)

    def restart(task: Task) -> Env:
        return _episodes_of(task.domain).episode_env(task, ctx)

    return (lambda task, group_id, i: restart(task)), restart


_MAKERS: Mapping[EpisodeKind, Maker] = {"single": _single, "repair": _repair, "agent": _agent}


def episode_turns(kind: EpisodeKind, tasks: Sequence[Task], *, max_turns: int | None = None,
                  max_attempts: int | None = None) -> int:
    """The runner's cap on the actions of an episode of ``kind`` over ``tasks``: 1 for single; for
    repair ``max_turns``, else ``max_attempts``, else the most attempts a task allows; for agent the
    most any task's domain says its episode takes with step limit ``max_turns`` (``HasEpisodeActions``:
    a BFCL task's user turns x (per-turn cap + 1); else the step limit), so that no episode is cut by
    the runner before its environment's own limits judge it."""
    return _TURNS[kind](tasks, max_turns, max_attempts)


def _agent_turns(tasks: Sequence[Task], max_turns: int | None, max_attempts: int | None) -> int:
    steps = max_turns or AGENT_STEPS
    limits = [domain.episode_actions(t, steps) if isinstance(domain := get_domain(t.domain), HasEpisodeActions)
              else steps for t in tasks]
    return max(limits, default=steps)


_TURNS: Mapping[EpisodeKind, Callable[[Sequence[Task], int | None, int | None], int]] = {
    "single": lambda tasks, max_turns, max_attempts: 1,
    "repair": lambda tasks, max_turns, max_attempts: (max_turns or max_attempts
                                                      or max((t.limits.max_attempts for t in tasks), default=1)),
    "agent": _agent_turns,
}


def attempts_allowed(kind: EpisodeKind, tasks: Sequence[Task], *, max_attempts: int | None = None) -> int | None:
    """The attempts an episode of ``kind`` is allowed (the post-repair figure is success within them):
    for repair ``max_attempts``, else the most any task allows; None for the other kinds (one attempt,
    or as many as an agent's environment judges)."""
    return _ATTEMPTS[kind](tasks, max_attempts)


_ATTEMPTS: Mapping[EpisodeKind, Callable[[Sequence[Task], int | None], int | None]] = {
    "single": lambda tasks, max_attempts: None,
    "repair": lambda tasks, max_attempts: max_attempts or max((t.limits.max_attempts for t in tasks), default=1),
    "agent": lambda tasks, max_attempts: None,
}


def protocol_fields(kind: EpisodeKind, *, max_turns: int | None) -> dict[str, Any]:
    """What a ``posttrain eval`` protocol states of its episodes beyond ``max_attempts`` (which says
    repair): an agent's kind and step limit; nothing for the others (their protocols predate kinds)."""
    return {"episodes": kind, "max_turns": max_turns} if kind == "agent" else {}


def protocol_note(kind: EpisodeKind) -> str | None:
    """What an evaluation's protocol says of its episodes (summary.json ``eval_protocol.episodes``)."""
    return _NOTES.get(kind)


_NOTES: Mapping[EpisodeKind, str] = {
    "repair": "repair: up to each task's limits.max_attempts attempts, feedback between them; pass@1 is the first "
              "attempt's",
}


def episode_tokens(kind: EpisodeKind, turns: int, max_new_tokens: int, *, budget: int | None = None) -> int:
    """Tokens an episode may add after its prompt: ``max_new_tokens`` for one answer; for multi-turn
    episodes every turn's answer and the observation after it, ``turns * (max_new_tokens +
    OBSERVATION_TOKENS) - OBSERVATION_TOKENS``, or the episode's token ``budget`` when smaller (the
    runner never appends past it). ``turns``: ``episode_turns``.

    >>> episode_tokens("single", 1, 20), episode_tokens("repair", 3, 20), episode_tokens("repair", 3, 20, budget=100)
    (20, 380, 100)
    """
    if kind == "single":
        return max_new_tokens
    length = turns * (max_new_tokens + OBSERVATION_TOKENS) - OBSERVATION_TOKENS
    return length if budget is None else min(length, budget)


_ROLES: Mapping[EpisodeKind, Literal["user", "tool"] | None] = {"single": None, "repair": "user", "agent": "tool"}
"""The role of an episode's observations as chat messages: repair feedback is a user turn (when the
prompts are chat-rendered), agent observations are tool results (always the chat template)."""


def limits_problem(kind: EpisodeKind, *, max_turns: int | None) -> str | None:
    """Why a step limit does not fit ``kind``, or None: more than one turn needs a multi-turn kind, and
    an agent's workspace holds at most ``MAX_STEPS`` steps (a layer each; overlayfs stacks at most 500)."""
    if kind == "agent" and max_turns is not None and max_turns > MAX_STEPS:
        return f"{max_turns} turns: agent episodes take at most {MAX_STEPS} (a workspace stacks a layer a turn)"
    if kind in MULTI_TURN or max_turns is None or max_turns <= 1:
        return None
    return f"{max_turns} turns need multi-turn episodes (repair or agent)"


def gives_feedback(kind: EpisodeKind) -> bool:
    """Whether episodes of ``kind`` append the verifier's feedback as a user turn (repair)."""
    return _ROLES[kind] == "user"


def chat_problem(kind: EpisodeKind, tokenizer: Any, prompt_chat: ChatTemplate | None) -> str | None:
    """Why the model's chat template cannot hold episodes of ``kind``, or None: agent episodes need
    the model's template to append tool results; repair feedback on chat-rendered prompts
    (``prompt_chat``: their template) a user turn (``ChatTemplate.check_appends``). An agent's
    environment also answers an unreadable call, or an answer with no call, with a user turn (the tool
    and workspace environments do), so agent episodes need both. Checked before any episode, so that
    the error is the user's, never an infra error mid-episode."""
    role = _ROLES[kind]
    if role is None or (role == "user" and prompt_chat is None):
        return None
    if role == "tool":
        try:
            agent_chat(tokenizer)
        except UserError as e:
            return f"{_APPENDS[role]}: {e}"
        return None
    try:
        (prompt_chat if prompt_chat is not None else ChatTemplate(tokenizer)).check_appends(role)
    except UserError as e:
        return f"{_APPENDS[role]}: {e}"
    return None


def agent_chat(tokenizer: Any) -> ChatTemplate:
    """The ``ChatTemplate`` agent episodes render with. Their environments append tool results, and a
    user turn for an unreadable call or an answer with no call (the tool and workspace environments),
    so the template must append both (``check_appends``). One that rewrites earlier turns as it goes
    (Qwen3 drops the ``<think>`` blocks before the last user message, and writes an answer with no
    reasoning one way last and another way before a tool result) gets ``on_rewrite="append"``: each
    observation is the template's rendering of the new messages appended to what was sampled, as verl
    and TRL keep the full reasoning in a multi-turn rollout; the context is then no longer the
    template's rendering of the whole conversation (docs/contracts.md). Raises ``ChatTemplateError``
    where neither holds (no end of turn found, call tags that are special tokens, ...)."""
    chat = ChatTemplate(tokenizer)
    try:
        for role in ("tool", "user"):
            chat.check_appends(role)
        return chat
    except UserError:
        appended = ChatTemplate(tokenizer, on_rewrite="append")
        for role in ("tool", "user"):
            appended.check_appends(role)
        return appended


_APPENDS = {"user": "repair feedback as a user turn on chat-rendered prompts (plain text: --no-chat, model.chat: false)",
            "tool": "tool results, and a user turn for an unreadable call, through the model's chat template"}


def tasks_problem(kind: EpisodeKind, tasks: Sequence[Task]) -> str | None:
    """Why ``tasks`` cannot run as episodes of ``kind``, or None: agent episodes need every task's
    domain to build its own environment (``HasEpisodes``)."""
    if kind != "agent":
        return None
    other = next((t for t in tasks if not has_episodes(t.domain)), None)
    if other is None:
        return None
    able = [d for d in domain_names() if "/" not in d and _has_episodes_or_broken(d)]
    return (f"task {other.id!r} is of domain {other.domain!r}, which builds no episode environment (episode_env: "
            f"posttrain.envs.HasEpisodes); agent episodes run on tasks of {able}")


def local_only(kind: EpisodeKind, tasks: Sequence[Task]) -> Task | None:
    """A task whose episodes of ``kind`` run their environment in this machine's sandbox (an agent
    episode of a sandboxed domain: not yet on a Ray cluster), or None."""
    if kind != "agent":
        return None
    return next((t for t in tasks if get_domain(t.domain).needs_sandbox), None)


def is_multi_turn(kind: EpisodeKind) -> bool:
    """Whether episodes of ``kind`` take more than one action (their figures: turns, attempts, tokens)."""
    return kind in MULTI_TURN


def has_episodes(domain: str) -> bool:
    """Whether ``domain`` builds agent episodes (``HasEpisodes``)."""
    return is_registered(domain) and isinstance(get_domain(domain), HasEpisodes)


def _has_episodes_or_broken(domain: str) -> bool:
    try:
        return has_episodes(domain)
    except TaskError:  # a plugin that fails to load: not what this message is about
        return False


def is_episode_record(turns: int, task: Task) -> bool:
    """Whether a record of ``turns`` turns is an agent episode's (its actions span several turns, so
    its last answer alone is not a response the task's single-response verifier can judge: the
    audit does not re-verify it)."""
    return turns > 0 and has_episodes(task.domain)


def _episodes_of(domain: str) -> HasEpisodes:
    found = get_domain(domain)
    if not isinstance(found, HasEpisodes):
        raise TypeError(f"domain {domain!r} has no episodes (no episode_env: posttrain.envs.HasEpisodes)")
    return found


# --- scripted demonstrations (SFT): the same environments, played by a script ------------------------

Script = Sequence[tuple[tuple[int, ...], str]]
"""The actions of a scripted episode, each as its ids (EOS last) and its text."""


def agent_script(chat: ChatTemplate, task: Task) -> list[tuple[tuple[int, ...], str]]:
    """The scripted actions of an agent episode of ``task``: its domain's ``demonstration_steps``
    written in the template's tool-call family, each followed by EOS (an empty step: ``FINAL_ANSWER``).
    A domain with no demonstration steps is a ``ValueError`` naming the task."""
    domain = _episodes_of(task.domain)
    if not isinstance(domain, HasDemonstrationSteps):
        raise ValueError(f"task {task.id!r}: domain {task.domain!r} has no demonstration_steps")
    texts = [chat.write_tool_calls(calls) if calls else FINAL_ANSWER for calls in domain.demonstration_steps(task)]
    return [((*chat.encode(text), chat.eos_token_id), text) for text in texts]


class _ScriptedSampler:
    """A ``Sampler`` for one scripted episode: its k-th request gets the k-th (action ids, text)."""

    def __init__(self, script: Script) -> None:
        self.script, self.k = script, 0

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        (context,) = prompt_ids
        ids, text = self.script[self.k]  # IndexError: the runner asked past the script (a bug)
        self.k += 1
        return [Generation(tuple(context), ids, (0.0,) * len(ids), text, "eos")]


def play_scripts(plan: Callable[[Task, int], Episodes], tasks: Sequence[Task], scripts: Mapping[str, Script],
                 service: Service | None, *, workers: int = 1) -> list[Trajectory | None]:
    """Scripted episodes (``scripts[task.id]``), each played by the episode runner in the environments
    ``plan(task, len(script))`` builds, like RL's episodes (every step a job of ``service``; an
    infra error restarts the episode). None: an episode lost to infra errors (its tries ran out)."""
    def one(task: Task) -> Trajectory | None:
        script = scripts[task.id]
        episodes = plan(task, len(script))
        params = SamplingParams(temperature=1.0, max_new_tokens=max(len(ids) for ids, _ in script))
        [run] = episodes.episodes([task], [f"demo/{task.id}"], 1)
        traj = run_batch(_ScriptedSampler(script), [run], params, max_turns=len(script), service=service)[0]
        return None if any(v.is_infra_error for v in traj.verdicts) else traj

    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:  # each waits on its steps' jobs
        return list(ex.map(one, tasks))
