"""Long episodes: hierarchical context management, and an episode loop that trains on exactly what
the model saw at each turn.

The context the model sees at a turn is built, as token ids, from (the seeds' design):

    prompt ids  +  [summary of older turns]  +  recent turns in full (observation ids, action ids)

- **recent turns in full**: the last ``keep_recent`` turns, exactly as sampled and observed;
- **older turns compressed** into a summary: by rule (``summarize="rule"``: the first
  ``summary_chars`` characters of each older observation, one line per turn, encoded as an
  observation the environment inserts), or by the policy itself (``"policy"``: when turns must be
  compressed, the model is asked ``SUMMARY_PROMPT`` as a turn of the episode and its sampled ids,
  unchanged, become the summary: that turn is trained like any other);
- **older observations in a retrieval index** (``retrieval=True``, ``bm25s``): an action that
  starts with ``search:`` is answered by the manager, not the environment, with the best-matching
  older observation (the model queries its own past as a tool);
- **a token budget**: the context never exceeds ``budget`` tokens (turns move to the summary, then
  the summary loses lines from its middle: the earliest one, an episode's setup, stays longest --
  what is lost in the middle of a long context goes first); the episode's whole token budget is
  ``max_tokens``;
- **the current instruction stays**: the turn of the environment's last observation (a recall
  episode's question) is never folded while the turns after it are only searches and their results;
  its observation is shown in full after the summary, before the newest search and its result, and
  the searches between them give way first (a search and its result together). Before, two searches
  at a recall question left it in no context the model saw at budget 300 (200 of 200 generated
  tasks: tests/rollout/test_context_question.py). Where the prompt, the instruction and the newest
  search with its result alone exceed the budget, they are cut from their start, as one overlong
  observation always was: the budget holds, the instruction's start may go.

Without management (``ContextPolicy(manage=False)``) the same budget is kept the way a plain
long-context loop keeps it: the prompt, then the most recent turns that fit (oldest dropped).

How the loss is assembled (``ManagedEpisode.rows``): turns whose contexts were compressed did not
see one growing sequence, so an episode is trained as one row per sampled action, ``[context the
model saw, action]`` with the loss on the action's tokens only and the logprobs it was sampled
with; every row of an episode carries the episode's advantage (computed once per episode, its group
of episodes), and the rows' tokens are aggregated together. With ``token_mean`` this is the same
loss as one row per episode whenever nothing was compressed (every action token counted once, under
the context it was sampled in); with the sequence-mean aggregations each row counts as a sequence.
Nothing is re-tokenized: action ids are the sampled ids, summaries and search results are new
observation ids.

Not here: the recipe keys (phase 2 of issue 25), a learned retriever.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from posttrain.envs import Env
from posttrain.rollout._limits import cut_by, sample_by_cap, sample_within
from posttrain.types import CutBy, Observation, Task, Trajectory, Turn, Verdict

if TYPE_CHECKING:  # the sampler module imports torch; an evaluation of a scripted agent needs neither
    from posttrain.policy import Sampler, SamplingParams

SUMMARY_PROMPT = "\nSummarize what you must remember so far:\n"
SEARCH_PREFIX = "search:"


@dataclass(frozen=True)
class ContextPolicy:
    """How an episode's context is kept within ``budget`` tokens (module docstring)."""

    budget: int
    """Most tokens the model sees at one turn (the prompt included)."""
    manage: bool = True
    """False: the plain loop's truncation (the prompt and the most recent turns that fit)."""
    keep_recent: int = 2
    """Turns kept in full."""
    summarize: Literal["rule", "policy"] = "rule"
    summary_chars: int = 48
    """Rule summaries: this many characters of each older observation."""
    retrieval: bool = True
    """Older observations in a bm25s index, queried by actions that start with ``search:``."""
    summary_tokens: int = 48
    """Most tokens a policy-written summary may take."""

    def __post_init__(self) -> None:
        if self.budget < 8 or self.keep_recent < 0 or self.summary_chars < 1 or self.summary_tokens < 1:
            raise ValueError(f"ContextPolicy: budget >= 8, keep_recent >= 0, summary sizes >= 1; got {self}")
        if self.summarize not in ("rule", "policy"):
            raise ValueError(f"ContextPolicy.summarize must be 'rule' or 'policy', got {self.summarize!r}")


@dataclass
class _Turn:
    observation_ids: tuple[int, ...]  # what came before the action (the prompt for turn 0)
    observation_text: str
    action_ids: tuple[int, ...] = ()
    tool: bool = False  # the observation is a search result, not the environment's

    @property
    def ids(self) -> list[int]:
        return [*self.observation_ids, *self.action_ids]


class ManagedContext:
    """The context of one episode (module docstring): ``context()`` is what the model sees next."""

    def __init__(self, prompt: Observation, encode: Callable[[str], list[int]], policy: ContextPolicy) -> None:
        self.prompt, self.encode, self.policy = prompt, encode, policy
        self.turns: list[_Turn] = []  # turns after the prompt, the last one without an action yet
        self.summary_ids: tuple[int, ...] = ()
        self.summarized = 0  # turns folded into the summary (never shown in full again)
        self._lines: list[str] = []  # rule summary, one line per folded turn
        self._docs: list[str] = []  # folded observations, for retrieval
        self._index = None

    def observe(self, obs: Observation, *, tool: bool = False) -> None:
        """A new observation (``tool``: a search result, not the environment's); the next action
        follows it."""
        self.turns.append(_Turn(tuple(obs.ids), obs.text, tool=tool))

    def act(self, action_ids: Sequence[int]) -> None:
        self.turns[-1].action_ids = tuple(action_ids)

    def _recent_ids(self, start: int) -> list[int]:
        return [i for t in self.turns[start:] for i in t.ids]

    def _instruction(self) -> int:
        """The turn of the environment's last observation (the current instruction): never folded,
        and shown whatever searches followed it (module docstring)."""
        return max((i for i, t in enumerate(self.turns) if not t.tool), default=0)

    def _foldable(self) -> int:
        """The turn before which everything may fold: all but the ``keep_recent`` last complete turns,
        never the current instruction's."""
        return min(len(self.turns) - 1 - self.policy.keep_recent, self._instruction())

    def needs_folding(self) -> bool:
        """Whether turns must move to the summary for the context to fit (managed policies)."""
        p = self.policy
        full = len(self.prompt.ids) + len(self.summary_ids) + len(self._recent_ids(self.summarized))
        return p.manage and self._foldable() > self.summarized and full > p.budget

    def fold(self, upto: int | None = None, summary_ids: Sequence[int] | None = None) -> None:
        """Fold turns ``summarized..upto`` (default: all but the ``keep_recent`` last complete ones,
        never the current instruction's) into the summary: rule lines, or ``summary_ids`` written by
        the policy."""
        p = self.policy
        upto = max(self.summarized, self._foldable()) if upto is None else upto
        for t in self.turns[self.summarized : upto]:
            text = t.observation_text.strip()
            if text:
                self._docs.append(text)
                self._lines.append(text.replace("\n", " ")[: p.summary_chars])
        self.summarized = max(self.summarized, upto)
        self._index = None
        if summary_ids is not None:
            self.summary_ids = tuple(summary_ids)
        elif p.summarize == "rule":
            self.summary_ids = tuple(self.encode("\nEarlier: " + " | ".join(self._lines) + "\n"))

    def context(self) -> list[int]:
        """The ids the model sees for its next action, at most ``budget`` of them when possible."""
        p = self.policy
        if p.manage:
            while self.needs_folding():
                self.fold()
            head = [*self.prompt.ids, *self.summary_ids]
            # the recent turns (the current observation and keep_recent - 1 before it) and the current
            # instruction's turn come before summary lines; beyond them, older turns give way first (_fit)
            recent, at = max(self.summarized, len(self.turns) - max(1, p.keep_recent)), self._instruction()
            current = len(self._recent_ids(recent))
            if self.summarized <= at < recent:  # its observation, and the search that led to the recent turns
                current += len(self.turns[at].observation_ids) + len(self.turns[recent - 1].action_ids)
            if len(head) + current > p.budget and self._lines:
                while self._lines and len(head) + current > p.budget:
                    # the middle goes first: the earliest line (an episode's setup) stays longest
                    self._lines.pop(1 if len(self._lines) > 1 else 0)
                    if p.summarize == "rule":
                        self.summary_ids = tuple(self.encode("\nEarlier: " + " | ".join(self._lines) + "\n"))
                    head = [*self.prompt.ids, *self.summary_ids]
            return self._fit(head, self.summarized)
        return self._fit(list(self.prompt.ids), 0)

    def _fit(self, head: list[int], start: int) -> list[int]:
        """``head`` + the most recent turns from ``start`` on that fit the budget (whole turns; the
        current observation always, cut from its start if it alone is too long). After the current
        instruction's turn, a search and its result are one unit: the newest and the instruction's
        observation are always kept, older searches while they fit beside them."""
        budget, at, turns = self.policy.budget, self._instruction(), self.turns
        units = [t.ids for t in turns[start:]]  # oldest first; joined, the turns as they were
        pin = None
        if start <= at < len(turns) - 1:  # searches follow the instruction
            pin = at - start
            searches = ([*turns[j].action_ids, *turns[j + 1].observation_ids]  # a search and its result
                        for j in range(at, len(turns) - 1))
            units[pin:] = [list(turns[at].observation_ids), *searches]
            units[-1] += turns[-1].action_ids
        kept: list[int] = []
        for k in range(len(units) - 1, -1, -1):
            held = units[pin] if pin is not None and pin < k else []  # room the instruction needs below
            if kept and k != pin and len(head) + len(held) + len(units[k]) + len(kept) > budget:
                kept = held + kept
                break
            kept = units[k] + kept
        return (head + kept)[-budget:] if len(head) + len(kept) > budget else head + kept

    def search(self, query: str) -> str:
        """The older observation that best matches ``query`` (bm25s), or a line saying there is none.
        Any query is answered, never raised: older observations with no word bm25s indexes (one
        character, stopwords, punctuation: ``"7"``, ``"."``) match nothing (bm25s raises on an
        index with no vocabulary, which took the whole batch down from one episode's search)."""
        import bm25s

        if not self._docs:
            return "no earlier notes"
        if self._index is None:
            corpus = bm25s.tokenize(self._docs, show_progress=False)
            if not corpus.vocab:
                return "no match"
            self._index = bm25s.BM25()
            self._index.index(corpus, show_progress=False)
        tokens = bm25s.tokenize([query], show_progress=False)
        if not tokens.vocab:
            return "no match"
        docs, scores = self._index.retrieve(tokens, k=1, show_progress=False)
        return self._docs[int(docs[0, 0])] if float(scores[0, 0]) > 0 else "no match"


@dataclass(frozen=True)
class Row:
    """One sampled action and exactly the context it was sampled in."""

    context_ids: tuple[int, ...]
    action_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    stop_reason: str
    kind: Literal["env", "search", "summary"]
    text: str = ""


@dataclass
class ManagedEpisode:
    """An episode run under a ``ContextPolicy``: its rows (what the model saw and did), verdicts, reward."""

    task: Task
    group_id: str
    sample_idx: int
    rows: list[Row] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    done: bool = False
    tokens: int = 0
    """Tokens after the prompt: actions and observations, searches and summaries included."""
    peak_context: int = 0
    cut_by: CutBy | None = None
    """The limit that stopped the episode before its environment said done (None: done), decided as the
    runner decides it (``_limits.cut_by``): ``"feedback_overflow"`` where a failed attempt's feedback
    took what was left of ``max_tokens``."""

    @property
    def reward(self) -> float:
        return self.verdicts[-1].reward if self.verdicts else 0.0

    def trajectories(self) -> list[Trajectory]:
        """One one-turn ``Trajectory`` per row (module docstring: how the loss is assembled), each
        carrying the episode's group, sample index, reward, last verdict and ``cut_by``, so that each
        row scores what its episode scores (``train._credit.episode_reward``): the verdict for an episode
        the environment ended or a failed attempt's feedback overflowed (``"feedback_overflow"``), the
        least a failure can for another cut (never the verdict of an attempt before the cut). Advantages
        are the episode's, computed over its group of episodes, not rows.

        Not yet the episode's: the length penalty and ``rl.attempt_discount``, which ``rewards_of``
        takes from a trajectory's own turns, see one row each. A failing episode of five 10-token
        actions scores 0 on every row where the runner's episode of the same tokens scores -0.75
        (``reward.length`` 1, ``max_tokens`` 60, ``overlong_buffer`` 40); scoring a managed episode
        once, over all its rows, is the credit's to do (``train._credit``) before these rows train."""
        verdict = self.verdicts[-1] if self.verdicts else None
        return [Trajectory(self.task.id, self.group_id, self.sample_idx,
                           (Turn(r.context_ids, r.action_ids, r.logprobs, r.stop_reason,  # type: ignore[arg-type]
                                 verdict, r.text),),
                           self.reward, truncated=not self.done, cut_by=self.cut_by)
                for r in self.rows]


def run_managed(
    sampler: Sampler,
    episodes: Sequence[tuple[Task, Env, str, int]],
    params: SamplingParams,
    policy: ContextPolicy,
    encode: Callable[[str], list[int]],
    *,
    max_turns: int,
    max_tokens: int | None = None,
) -> list[ManagedEpisode]:
    """Run ``(task, env, group_id, sample_idx)`` episodes to their end under ``policy``, all unfinished
    episodes sampled in one ``generate`` call per round. Environments step in this thread; each is
    closed (``Env.close``) when this returns or raises."""
    try:
        return _run_managed(sampler, episodes, params, policy, encode, max_turns=max_turns, max_tokens=max_tokens)
    finally:
        for _, env, _, _ in episodes:
            env.close()


@dataclass
class _Live:
    """An episode while ``run_managed`` runs it, and what its last row leaves for its cut (``_limits.cut_by``)."""

    ep: ManagedEpisode
    env: Env
    ctx: ManagedContext
    last: Verdict | None = None  # the verdict of its last row's step (None: a search, a summary, none given)
    feedback: int = 0  # ids of the observation after its last row
    turns_left: int = 0  # env turns the step limit (and the rounds) still allow after its last row


def _run_managed(sampler: Sampler, episodes: Sequence[tuple[Task, Env, str, int]], params: SamplingParams,
                 policy: ContextPolicy, encode: Callable[[str], list[int]], *, max_turns: int,
                 max_tokens: int | None) -> list[ManagedEpisode]:
    states = []
    for task, env, gid, idx in episodes:
        ctx = ManagedContext(env.reset(task), encode, policy)
        ctx.observe(Observation((), ""))  # the prompt is the head; turn 0's own observation is empty
        states.append(_Live(ManagedEpisode(task, gid, idx), env, ctx))
    rounds = max_turns * 3  # env turns, plus the searches and summaries between them
    for rnd in range(rounds):
        live = [s for s in states if not s.ep.done and _room(s.ep, max_tokens) > 0 and _env_turns(s.ep) < max_turns]
        if not live:
            break
        summary = [s for s in live if policy.summarize == "policy" and s.ctx.needs_folding()]
        if summary:
            _summary_round(sampler, summary, params, policy, seed_offset=rnd)
            continue
        contexts = [s.ctx.context() for s in live]
        gens = sample_within(sampler, contexts, params, [_room(s.ep, max_tokens) for s in live], seed_offset=rnd)
        for s, seen, g in zip(live, contexts, gens, strict=True):
            ep = s.ep
            ep.peak_context = max(ep.peak_context, len(seen) + len(g.completion_ids))
            searching = policy.manage and policy.retrieval and g.text.lstrip().startswith(SEARCH_PREFIX)
            ep.rows.append(Row(tuple(seen), g.completion_ids, g.logprobs, g.stop_reason,
                               "search" if searching else "env", g.text))
            s.ctx.act(g.completion_ids)
            s.last = None
            if searching:
                found = s.ctx.search(g.text.lstrip()[len(SEARCH_PREFIX):].strip())
                obs = Observation(tuple(encode("\nFound: " + found + "\n")), found)
            else:
                result = s.env.step(g)
                obs, ep.done, s.last = result.observation, result.done, result.verdict
                if result.verdict is not None:
                    ep.verdicts.append(result.verdict)
            ep.tokens += len(g.completion_ids) + len(obs.ids)
            s.feedback, s.turns_left = len(obs.ids), min(max_turns - _env_turns(ep), rounds - rnd - 1)
            s.ctx.observe(obs, tool=searching)
    for s in states:
        if not s.ep.done:  # the runner's decision, on the runner's terms (the context itself never overflows)
            s.ep.cut_by = cut_by(s.env, s.last, room=_room(s.ep, max_tokens), feedback=s.feedback,
                                 turns_left=s.turns_left)
    return [s.ep for s in states]


def _summary_round(sampler: Sampler, live: list[_Live], params: SamplingParams, policy: ContextPolicy, *,
                   seed_offset: int) -> None:
    """The policy writes the summary: asked ``SUMMARY_PROMPT`` after its current context."""
    contexts = []
    for s in live:
        ctx = s.ctx
        contexts.append([*ctx._fit([*ctx.prompt.ids, *ctx.summary_ids], ctx.summarized),
                         *ctx.encode(SUMMARY_PROMPT)][-policy.budget :])
    gens = sample_by_cap(sampler, contexts, params, [max(policy.summary_tokens, 1)] * len(live),
                         seed_offset=seed_offset)
    for s, seen, g in zip(live, contexts, gens, strict=True):
        ep = s.ep
        ep.rows.append(Row(tuple(seen), g.completion_ids, g.logprobs, g.stop_reason, "summary", g.text))
        ep.tokens += len(g.completion_ids)
        ep.peak_context = max(ep.peak_context, len(seen) + len(g.completion_ids))
        s.last, s.feedback = None, 0
        s.ctx.fold(summary_ids=g.completion_ids)


def _room(ep: ManagedEpisode, max_tokens: int | None) -> float:
    return math.inf if max_tokens is None else max_tokens - ep.tokens


def _env_turns(ep: ManagedEpisode) -> int:
    return sum(r.kind == "env" for r in ep.rows)
