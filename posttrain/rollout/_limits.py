"""An episode's limits: their check, the sampling of a round within each episode's room, and which
limit ended an episode its environment did not end (``cut_by``). The episode runner
(``_runner.run_batch``) and context management (``_context.run_managed``) both decide through these,
so that an episode is cut, and scored, alike under either.

Limits: ``max_turns`` actions per episode, ``max_tokens`` tokens after the prompt (actions and
observations together; each action gets at most what is left), and, in the runner, ``max_context``
tokens of context in all, prompt included (the model's positions: an agent's tool result of 12,000
characters grows the context by thousands of tokens, and a vLLM engine refuses a prompt longer than
its ``max_model_len``, which would end the run): an episode whose context reaches it is sampled no
further, and each action after the first is capped to fit (the first is the recipe's:
``train.recipe`` refuses prompts and caps the model cannot hold). Context management keeps its
context within its own budget (``ContextPolicy.budget``) and has no such cut. An episode stopped by
a limit before its environment said done is ``truncated`` and names the limit (``cut_by``: the least
a failure scores, the policy's doing, never infra); an episode whose last action hit its token cap
is ``truncated`` too. Where it was a failed attempt's feedback that filled the room (the attempt
judged, another allowed, room left before the feedback), the episode ends
``cut_by="feedback_overflow"`` and scores that attempt's verdict, as if it were the last attempt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from posttrain.envs import Env
from posttrain.rollout._env import CountsAttempts
from posttrain.types import CutBy, Generation, Verdict

if TYPE_CHECKING:  # the sampler module imports torch; an evaluation of a scripted agent needs neither
    from posttrain.policy import Sampler, SamplingParams


def check_limits(max_turns: int, max_tokens: int | None, max_context: int | None) -> None:
    """``ValueError`` naming a limit the runner cannot keep (no action allowed, no room for one)."""
    if max_turns < 1 or (max_tokens is not None and max_tokens < 1):
        raise ValueError(f"max_turns and max_tokens must be >= 1, got {max_turns} and {max_tokens}")
    if max_context is not None and max_context < 2:
        raise ValueError(f"max_context must be >= 2, got {max_context}")


def sample_by_cap(sampler: Sampler, contexts: Sequence[Sequence[int]], params: SamplingParams, caps: Sequence[int],
                  *, seed_offset: int) -> list[Generation]:
    """``contexts`` sampled with ``params``, row ``i`` to at most ``caps[i]`` new tokens: one ``generate``
    call per distinct cap, each with its own seed, ``seed + 7919 x seed_offset + j`` for the ``j``-th
    cap (largest first): one seed for every call re-drew the same numbers, so rows of two caps, and an
    episode's successive rounds, sampled from the same draws. Round 0 of an unbudgeted batch is exactly
    one ``generate(params)``: same seed, same samples."""
    out: list[Generation | None] = [None] * len(contexts)
    for j, cap in enumerate(sorted(set(caps), reverse=True)):
        rows = [i for i, c in enumerate(caps) if c == cap]
        seed = None if params.seed is None else params.seed + 7919 * seed_offset + j
        sub = dataclasses.replace(params, max_new_tokens=cap, seed=seed)
        for i, g in zip(rows, sampler.generate([contexts[i] for i in rows], sub), strict=True):
            out[i] = g
    return [g for g in out if g is not None]


def sample_within(sampler: Sampler, contexts: Sequence[Sequence[int]], params: SamplingParams,
                  rooms: Sequence[float], *, seed_offset: int) -> list[Generation]:
    """``contexts`` sampled with ``params``, row ``i`` to at most ``rooms[i]`` new tokens (every room
    >= 1: an episode with none is sampled no further), ``max_new_tokens`` at most (``sample_by_cap``)."""
    caps = [int(min(params.max_new_tokens, room)) for room in rooms]
    return sample_by_cap(sampler, contexts, params, caps, seed_offset=seed_offset)


def cut_by(env: Env, last: Verdict | None, *, room: float, feedback: int, turns_left: int) -> CutBy:
    """The limit that ended an episode its environment did not end. ``room``: what the next action may
    have (<= 0: a token budget or the context is full); ``last``: the verdict of the last action's step
    (None: no attempt, a tool call, a search, a summary); ``feedback``: the ids of the observation that
    followed it; ``turns_left``: the actions the step limit still allows.

    ``"max_turns"``: room was left, the step limit ended it. ``"feedback_overflow"``: the last action was
    an attempt judged a failure (neither a pass nor infra) that the environment answered with feedback
    and another try, the step limit allows every attempt it has left (``CountsAttempts``: failing them
    all would not end in a ``"max_turns"`` cut), and the room left after the attempt was taken by the
    feedback (full only once the feedback was counted): the attempt was made and judged, the feedback
    cannot be shown, so the episode ends on that verdict (``train._credit.episode_reward``). Else
    ``"max_tokens"``: the attempt itself ran to the limit, or an environment that does not say how many
    attempts it has left; both cuts score the least a failure can, as ever.

    >>> class Repair:
    ...     attempts_left = 2
    >>> fail = Verdict("fail", 0.0)
    >>> [cut_by(Repair(), fail, room=-5, feedback=20, turns_left=n) for n in (2, 1)]  # a turn for each, or not
    ['feedback_overflow', 'max_tokens']
    """
    if room > 0:
        return "max_turns"
    left = env.attempts_left if isinstance(env, CountsAttempts) else 0  # one that does not say: the floor
    if (last is not None and not last.passed and not last.is_infra_error
            and 0 < left <= turns_left  # the step limit would let it fail every attempt left
            and room + feedback > 0):  # the room before the feedback's ids: both caps moved by them
        return "feedback_overflow"
    return "max_tokens"
