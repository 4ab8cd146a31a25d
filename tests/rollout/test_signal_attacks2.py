"""Repair episodes attacked by a policy that reads its feedback instead of the task: each failed
attempt's feedback line, as the policy finds it in its own context, echoed as the next attempt --
the whole line, each quoted piece of it, each number in it. Run by the episode runner
(``run_batch``) on ``RepairEnv`` over generated tasks of the domains verified without a sandbox,
each echo must end in the attempt's own ``fail`` verdict: scored (never cut, never infra), so that
the repair loop teaches no copying of what the grader says (reference/reward-hacking.md, MATH-02,
JUDGE-02; ../shared/reference/episodes.md section 6).

Pinned here: two tasks each of math, json, tool and recall, four echoes each (a verifier whose
feedback named the gold passed all four). Measured outside the suite over 30 generated tasks of each
of math, json, tool, function, recall, doc and files and every rg generator (the noop's failure, then
each echo -- the line, each quoted piece, each number, each boxed or tagged -- as an attempt): 0 passes
(two rg tasks whose feedback holds the word "no" passed by it, the gold by chance). What this file
does not pin: a blind enumeration of a closed answer set, which passed repair episodes of the rg
generators whose answer is one of two or three words in 100 of 100 tasks with as many attempts; a
wrong answer to such a generator now ends the episode (``Verdict.ends_repair``, as doc's does), and
tests/envs/test_rg_repair_guess.py pins it.
"""

from __future__ import annotations

import re

import pytest

from posttrain.envs import RepairEnv, get_domain
from posttrain.envs._repair import FEEDBACK_HEAD
from posttrain.policy import Generation, SamplingParams, build_char_tokenizer
from posttrain.rollout import Episode, run_batch

TOK = build_char_tokenizer()
DOMAINS = ("math", "json", "tool", "recall")
ECHOES = 4


def echoes(line: str) -> list[str]:
    """What a copying policy answers after reading ``line``: the line, each quoted piece, each number."""
    quoted = re.findall(r"'([^']+)'|\"([^\"]+)\"|`([^`]+)`", line)
    pieces = [next(p for p in q if p) for q in quoted] + re.findall(r"-?\d+(?:\.\d+)?", line)
    return [line, *dict.fromkeys(pieces)][:ECHOES]


class Echo:
    """Answers ``first``, then the ``k``-th echo of the last feedback line in its context."""

    def __init__(self, first: str, k: int) -> None:
        self.first, self.k = first, k

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out = []
        for ids in map(tuple, prompts):
            seen = TOK.decode(list(ids), skip_special_tokens=True)
            line = seen.rpartition(FEEDBACK_HEAD)[2].strip() if FEEDBACK_HEAD in seen else None
            text = self.first if line is None else echoes(line)[min(self.k, len(echoes(line)) - 1)]
            action = (*TOK(text, add_special_tokens=False)["input_ids"], TOK.eos_token_id)
            out.append(Generation(ids, action, (0.0,) * len(action), text, "eos"))
        return out


@pytest.mark.parametrize("name", DOMAINS)
def test_echoing_the_feedback_never_passes_a_repair_episode(name: str) -> None:
    domain = get_domain(name)
    verify = domain.make_verifier(None)
    for task in domain.generate_tasks(2, seed=11):
        first = domain.noop_response(task)
        for k in range(ECHOES):
            env = RepairEnv(verify, lambda s: TOK(s)["input_ids"], lambda s: TOK(s, add_special_tokens=False)["input_ids"],
                            max_attempts=2)
            [traj] = run_batch(Echo(first, k), [Episode(task, env, f"g/{task.id}/{k}")],
                               SamplingParams(max_new_tokens=2000), max_turns=2)
            outcomes = [v.outcome for v in traj.verdicts]
            assert outcomes in (["fail"], ["fail", "fail"]) and traj.cut_by is None, (task.id, k, outcomes,
                                                                                      traj.turns[-1].text)
