"""The context manager's retrieval tool (posttrain/rollout/_context.py) from a policy's side: any
``search:`` query is answered with one older observation or a line saying there is none, never an
exception out of ``run_managed`` (which takes the whole batch down, not the one episode) and never
more than one observation. Observations with no word bm25s indexes ("7", ".") made an index with no
vocabulary, on which every search raised (1 of 1 episodes before, 0 after); a recall episode's
searches (empty, wildcard, stopwords, NUL, a huge query) were answered before and are still.
"""

from __future__ import annotations

from posttrain.envs._base import fail
from posttrain.envs.recall import ENV, RecallEpisode
from posttrain.policy import Generation, SamplingParams
from posttrain.rollout._context import ContextPolicy, ManagedContext, run_managed
from posttrain.types import Observation, StepResult, Task


def encode(text: str) -> list[int]:
    return [ord(c) % 512 + 1 for c in text]


class Script:
    """One episode's replies in order (a test double of a sampler: the actions a policy chose)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out = []
        for ids in prompts:
            text = self.replies.pop(0)
            action = tuple(encode(text))[: params.max_new_tokens]
            out.append(Generation(tuple(ids), action, (0.0,) * len(action), text, "eos"))
        return out


class Digits:
    """An environment whose observations are one character each ("7", "."): five of them, then the
    answer is checked (always wrong here: the policy's own failure)."""

    def reset(self, task: Task) -> Observation:
        self.shown = 0
        return Observation(tuple(encode("Count.")), "Count.")

    def step(self, action: Generation) -> StepResult:
        self.shown += 1
        if self.shown > 5:
            return StepResult(Observation(()), fail("Wrong.", "wrong_answer"), True)
        text = "7" if self.shown % 2 else "."
        return StepResult(Observation(tuple(encode(text)), text), None, False)

    def close(self) -> None:
        pass


POLICY = ContextPolicy(budget=24, keep_recent=1, retrieval=True)


def test_a_search_over_wordless_observations_is_no_match_not_a_crash() -> None:
    task = Task(id="d", domain="digits", prompt="Count.", fields={})
    replies = ["ok", "ok", "ok", "search: 7", "search: the", "search: a", "ok", "ok", "ok", "12"]
    [ep] = run_managed(Script(replies), [(task, Digits(), "g", 0)], SamplingParams(max_new_tokens=8), POLICY,
                       encode, max_turns=8)
    found = [r.text for r in ep.rows if r.kind == "search"]
    assert len(found) == 3 and ep.done and ep.verdicts[-1].outcome == "fail"  # its own verdict, not a raise


def test_any_query_on_a_recall_episode_gets_one_observation_or_none() -> None:
    [task] = ENV.generate_level(1, level=12, seed=4)
    ctx = ManagedContext(Observation((1,), "p"), encode, POLICY)
    env = RecallEpisode(encode, encode)
    ctx.observe(env.reset(task))
    shown = []
    while True:
        ctx.act((2,))
        step = env.step(Generation((), (), (), "ok", "eos"))
        if step.done:
            break
        shown.append(step.observation.text.strip())
        ctx.observe(step.observation)
    ctx.fold()
    for query in ["", "*", ".*", "the is of", "\x00", "é" * 50, "code " * 20_000, "Note", task.fields["key"]]:
        answer = ctx.search(query)
        assert answer in ("no match", *shown), (query[:20], answer)
