"""Repair episodes of rg generators whose answer is one of a few words, played by a policy that cycles
those words blind, one an attempt, through the episode runner (``run_batch``) on ``RepairEnv``.

Before: told "Wrong answer.", the answer was among the few left, and the next guess was paid in full
(``attempt_discount`` 1.0): with as many attempts as answers, cycling passed every episode (100 of 100
of syllogism, course_schedule, game_of_life_halting, isomorphic_strings, ransom_note, circuit_logic with
2 attempts, 50 on the first; acre and mahjong_puzzle with 3, 34 on the first). Now a wrong answer to a
task of ``_names.FEW_ANSWERS`` is final (``Verdict.ends_repair``): the episode pays what its first guess
does, and its feedback names no answer. Not covered here: the counts over every such generator
(``FEW_ANSWERS``' docstring, measured outside the suite), other domains.

Still repaired: a format failure of those generators (it says nothing of the answer), and a wrong
answer to an open-answer generator (basic_arithmetic: wrong, then right, passes).
"""

from __future__ import annotations

import re

import pytest

from posttrain.envs import RepairEnv, get_domain
from posttrain.envs._repair import FEEDBACK_HEAD
from posttrain.envs.rg._names import FEW_ANSWERS
from posttrain.policy import Generation, SamplingParams, build_char_tokenizer
from posttrain.rollout import Episode, run_batch
from posttrain.types import Task, Verdict

TOK = build_char_tokenizer()
CLOSED = {"course_schedule": ("False", "True"), "circuit_logic": ("0", "1"), "acre": ("on", "off", "undetermined")}
N = 6


class Cycle:
    """Answers ``answers[k]`` where ``k`` is the number of feedback lines in its context."""

    def __init__(self, answers: tuple[str, ...]) -> None:
        self.answers = answers

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out = []
        for ids in map(tuple, prompts):
            k = TOK.decode(list(ids), skip_special_tokens=True).count(FEEDBACK_HEAD.strip())
            text = self.answers[min(k, len(self.answers) - 1)]
            action = (*TOK(text, add_special_tokens=False)["input_ids"], TOK.eos_token_id)
            out.append(Generation(ids, action, (0.0,) * len(action), text, "eos"))
        return out


def episodes(name: str, tasks: list[Task], answers: tuple[str, ...]) -> list[tuple[Verdict, ...]]:
    verify = get_domain(name).make_verifier(None)
    runs = [Episode(t, RepairEnv(verify, lambda s: TOK(s)["input_ids"],
                                 lambda s: TOK(s, add_special_tokens=False)["input_ids"], max_attempts=len(answers)),
                    f"g{i}") for i, t in enumerate(tasks)]
    return [tuple(t.verdicts) for t in run_batch(Cycle(answers), runs, SamplingParams(max_new_tokens=64),
                                                 max_turns=len(answers))]


@pytest.fixture(scope="module")
def tasks() -> dict[str, list[Task]]:
    return {g: get_domain(f"rg/{g}").generate_tasks(N, seed=7) for g in (*CLOSED, "basic_arithmetic")}


@pytest.mark.parametrize("generator", sorted(CLOSED))
def test_cycling_a_few_answers_pays_only_the_first_guess(generator: str, tasks: dict[str, list[Task]]) -> None:
    answers = CLOSED[generator]
    played = episodes(f"rg/{generator}", tasks[generator], tuple(f"<answer>{a}</answer>" for a in answers))
    first = sum(v[0].passed for v in played)
    assert 0 < first < N  # the first guess is right on some tasks, wrong on others: both are played
    assert sum(v[-1].passed for v in played) == first  # before: N of N
    for verdicts in played:
        assert len(verdicts) == 1
        if not verdicts[0].passed:
            assert verdicts[0].outcome == "fail" and verdicts[0].ends_repair
            assert verdicts[0].error_class == "wrong_answer" and verdicts[0].reward == 0.0
            assert not set(re.findall(r"\w+", verdicts[0].feedback.lower())) & {a.lower() for a in answers}


@pytest.mark.parametrize("generator", sorted(CLOSED))
def test_gold_passes_and_a_format_failure_is_still_repaired(generator: str, tasks: dict[str, list[Task]]) -> None:
    task = tasks[generator][0]
    played = episodes(f"rg/{generator}", [task], ("no answer block", task.reference))
    assert [v.outcome for v in played[0]] == ["fail", "pass"]
    assert played[0][0].error_class == "format" and not played[0][0].ends_repair


def test_an_open_answer_is_still_repaired(tasks: dict[str, list[Task]]) -> None:
    assert "basic_arithmetic" not in FEW_ANSWERS
    task = tasks["basic_arithmetic"][0]
    wrong = f"<answer>{int(float(task.fields['answer'])) + 1}</answer>"
    played = episodes("rg/basic_arithmetic", [task], (wrong, task.reference))
    assert [v.outcome for v in played[0]] == ["fail", "pass"] and not played[0][0].ends_repair


def test_the_closed_generators_are_few_answers() -> None:
    named = {"syllogism", "course_schedule", "game_of_life_halting", "isomorphic_strings", "ransom_note",
             "circuit_logic", "acre", "mahjong_puzzle"}
    assert named <= FEW_ANSWERS and "propositional_logic" not in FEW_ANSWERS
