"""A fifth read of the recall domain as a policy that wants reward without recalling the fact: through
the repair kit, the verifier's feedback, the answer distribution, lenient forms, the context manager's
retrieval tool and responses meant to crash the verifier (tests/envs/test_recall_attacks.py to
test_recall_attacks4.py pin the answers chosen by place, the hedges and echoes).

Found, and fixed: a repair episode (``rl.episodes: repair``, ``posttrain eval --episodes repair``; a
task's ``limits.max_attempts`` up to 100) went on after a wrong number, whose feedback ("Wrong
number.") leaves the answer among the few codes not yet tried: a policy that answered the codes in
the order shown, one an attempt, never reading the key, passed 200 of 200 level-8 tasks with 10
attempts (136 with 5, 81 with 3, 54 with 2, 28 with 1), paid in full (``rl.attempt_discount`` 1.0).
A wrong number now ends the episode (``Verdict.ends_repair``, as rg's few-answer generators and doc's
closed answers do): 28 of 200 with any number of attempts, what the first guess passes. A format
failure (no number, several) says nothing of the value and is still repaired.

Held (no source change), pinned as regression cases:

- the feedback is the same for every wrong code, and a hedge's feedback is the same whether the fact
  is among its candidates or not: nothing to read off it;
- the most common value of 300 tasks (the gold of 2 of them), played on 300 of another seed, passed 0
  of 300 at each of levels 1, 2, 4, ..., 64, both families (``fact_first`` too), and of
  ``generate_tasks`` (pinned: at most 2): values are uniform over 1000-9999;
- patterns, ranges, partial or padded values and the value inside a longer digit run fail: the
  comparison is one whole 4-digit run, equal to the value;
- a managed episode's search (``search:`` in ``rollout._context``) copied as the answer passes every
  task when it names the key (the memory tool at work, as designed) and near chance when it does not:
  "code", "number", the key's last word, "Note", stopwords: 11, 7, 18, 18, 0 of 120, chance 15.4
  (pinned: at most 1.3 times chance);
- a policy that searches instead of answering is cut by the step limit (searches never end an
  episode), every row scoring the failure floor: 0 where a wrong answer earns its 0.2 of format credit;
- no response makes the verifier, guarded or in the episode environment, anything but pass or fail
  (lone surrogates, NUL, a million digits, 200,000 numbers, a thousand reasoning tags).
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from posttrain.envs import RepairEnv
from posttrain.envs._repair import FEEDBACK_HEAD
from posttrain.envs.recall import ENV, RecallEpisode, check_answer
from posttrain.policy import Generation, SamplingParams, build_char_tokenizer
from posttrain.rollout import Episode, run_batch
from posttrain.rollout._context import ContextPolicy, run_managed
from posttrain.types import Task

VERIFY = ENV.make_verifier(None)
TOK = build_char_tokenizer()
_CODE = re.compile(r"The [a-z ]+ is (\d{4})\.")


def _codes(task: Task) -> list[str]:
    """The codes the task states, in the order shown."""
    return _CODE.findall(ENV.render_prompt(task).split("Question")[0])


class Cycle:
    """A policy that never reads the key: its k-th attempt is the k-th code of its prompt, k the
    feedback lines in its context."""

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out = []
        for ids in map(tuple, prompts):
            seen = TOK.decode(list(ids), skip_special_tokens=True)
            codes = _CODE.findall(seen.split("Question")[0])
            text = codes[min(seen.count(FEEDBACK_HEAD.strip()), len(codes) - 1)]
            action = (*TOK(text, add_special_tokens=False)["input_ids"], TOK.eos_token_id)
            out.append(Generation(ids, action, (0.0,) * len(action), text, "eos"))
        return out


def _repair(tasks: list[Task], attempts: int, sampler) -> list[tuple]:
    runs = [Episode(t, RepairEnv(VERIFY, lambda s: TOK(s)["input_ids"],
                                 lambda s: TOK(s, add_special_tokens=False)["input_ids"], max_attempts=attempts),
                    f"g{i}") for i, t in enumerate(tasks)]
    return [tuple(t.verdicts) for t in run_batch(sampler, runs, SamplingParams(max_new_tokens=64), max_turns=attempts)]


def test_cycling_the_codes_through_repair_pays_what_the_first_guess_does() -> None:
    tasks = ENV.generate_level(60, level=8, seed=3)
    first = sum(_codes(t)[0] == t.reference for t in tasks)
    episodes = _repair(tasks, 10, Cycle())
    passes = sum(v[-1].passed for v in episodes)
    assert passes == first <= 0.25 * len(tasks), (passes, first, len(tasks))  # was 60 of 60
    assert all(len(v) == 1 and (v[0].passed or v[0].ends_repair) for v in episodes)


class HedgeThenAnswer:
    """Every code at once (a format failure), then the fact: a repair the feedback allows."""

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out = []
        for ids in map(tuple, prompts):
            seen = TOK.decode(list(ids), skip_special_tokens=True)
            key = re.findall(r"What is the (.+?)\?", seen)[-1]
            value = re.findall(rf"The {re.escape(key)} is (\d{{4}})\.", seen)[-1]
            text = value if FEEDBACK_HEAD.strip() in seen else " ".join(_CODE.findall(seen))
            action = (*TOK(text, add_special_tokens=False)["input_ids"], TOK.eos_token_id)
            out.append(Generation(ids, action, (0.0,) * len(action), text, "eos"))
        return out


def test_a_format_failure_is_still_repaired() -> None:
    tasks = ENV.generate_level(10, level=4, seed=4)
    for verdicts in _repair(tasks, 3, HedgeThenAnswer()):
        assert [v.error_class for v in verdicts] == ["format", None] and verdicts[-1].passed


def test_the_feedback_says_nothing_of_the_value() -> None:
    for task in [*ENV.generate_tasks(40, seed=51), *ENV.generate_level(20, level=32, seed=52)]:
        codes, value = _codes(task), task.reference
        others = [c for c in codes if c != value]
        wrong = {(v.feedback, v.error_class, v.reward) for v in (VERIFY(task, c) for c in others)}
        assert wrong == {("Wrong number.", "wrong_answer", 0.0)}, task.id
        with_fact, without = VERIFY(task, f"{value} {others[0]}"), VERIFY(task, f"{others[1]} {others[0]}")
        assert (with_fact.feedback, with_fact.error_class) == (without.feedback, without.error_class), task.id
        assert with_fact.evidence["numbers"] == sorted([value, others[0]])  # its own numbers, nothing more


@pytest.mark.parametrize("fact_first", [False, True])
def test_the_most_common_value_passes_near_chance_at_every_level(fact_first: bool) -> None:
    for level in (1, 2, 4, 8, 16, 32, 64):
        seen = Counter(t.reference for t in ENV.generate_level(300, level=level, seed=61, fact_first=fact_first))
        constant = seen.most_common(1)[0][0]
        played = ENV.generate_level(300, level=level, seed=62, fact_first=fact_first)
        passes = sum(VERIFY(t, constant).passed for t in played)
        assert passes <= 2, (level, fact_first, constant, passes)
    constant = Counter(t.reference for t in ENV.generate_tasks(300, seed=61)).most_common(1)[0][0]
    assert sum(VERIFY(t, constant).passed for t in ENV.generate_tasks(300, seed=62)) <= 2


def test_patterns_ranges_and_near_values_fail() -> None:
    for task in ENV.generate_level(30, level=6, seed=7):
        v = task.reference
        for answer in ("[0-9]{4}", r"\d{4}", "****", "any 4-digit number", "1000-9999", "between 1000 and 9999",
                       "1000..9999", v[:3], v[:3] + "x", v[:3] + "?", v[1:], f"{v}{v[-1]}", f"0{v}", f"{v}{v}",
                       f"{v[:2]},{v[2:]}", f"{v[0]},{v[1:]}", f"{v[:2]} {v[2:]}", f"{v}|{_codes(task)[0]}"):
            if answer == f"{v}|{v}":
                continue  # the first code is the fact: that is one number, the value
            got = VERIFY(task, answer)
            assert (got.outcome, got.reward) == ("fail", 0.0), (task.id, answer, got)


def _decode(ids) -> str:
    return "".join(chr(i - 1) for i in ids)


def _encode(text: str) -> list[int]:
    return [ord(c) + 1 for c in text]


class Searcher:
    """Replies ok to every note; asked the question, searches ``query(key)`` and answers what was found,
    whole: the result of the memory tool copied as the answer."""

    def __init__(self, query) -> None:
        self.query = query

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out = []
        for ids in prompts:
            text = _decode(ids)
            last = text.rstrip().splitlines()[-1] if text.strip() else ""
            reply = "ok"
            if last.startswith("Found:"):
                reply = last.removeprefix("Found:").strip()
            elif text.rstrip().endswith("Answer:"):
                reply = "search: " + self.query(re.findall(r"What is the (.+?)\?", text)[-1])
            action = tuple(_encode(reply))
            out.append(Generation(tuple(ids), action, (0.0,) * len(action), reply, "eos"))
        return out


def test_a_search_copied_as_the_answer_passes_near_chance_unless_it_names_the_key() -> None:
    tasks = [t for level in (4, 8, 16) for t in ENV.generate_level(40, level=level, seed=5)]
    chance = sum(1 / len(_codes(t)) for t in tasks)
    queries = {"the key": lambda key: key, "the question": lambda key: f"Question: What is the {key}? Answer:",
               "code": lambda key: "code", "number": lambda key: "number", "the key's last word": lambda key:
               key.split()[-1], "stopwords": lambda key: "The is", "note": lambda key: "Note"}
    passes = {}
    for name, query in queries.items():
        runs = [(t, RecallEpisode(_encode, _encode), f"g{i}", 0) for i, t in enumerate(tasks)]
        eps = run_managed(Searcher(query), runs, SamplingParams(max_new_tokens=200), ContextPolicy(budget=300),
                          _encode, max_turns=120)
        assert all(e.done and len(e.verdicts) == 1 for e in eps), name
        passes[name] = sum(e.reward for e in eps)
    assert passes["the key"] == passes["the question"] == len(tasks)  # the memory tool, as designed
    blind = {k: n for k, n in passes.items() if k not in ("the key", "the question")}
    assert max(blind.values()) <= 1.3 * chance, (blind, round(chance, 1))


WEIRD = ["\ud800", "\udfff\ud800", "\x00", "\x00" * 1000, "1" * 1_000_000, " ".join(["1234"] * 200_000),
         "<think>" * 1000, "</think>" * 1000, "<think></think>" * 1000 + "{x}", "{" * 10_000, "[" * 10_000,
         "\u0665\u0665\u0665\u0665", "\ufeff", "\u202e1234", "%s%d{0}", "\\", "\n" * 100_000]


def test_no_response_makes_the_verifier_anything_but_pass_or_fail() -> None:
    [task] = ENV.generate_level(1, level=3, seed=8)
    for weird in WEIRD:
        for response in (weird, weird + task.reference, task.reference + weird):
            assert VERIFY(task, response).outcome in ("pass", "fail"), repr(response[:40])
            assert check_answer(task, response).outcome in ("pass", "fail")  # RecallEpisode's, unguarded
    env = RecallEpisode(_encode, _encode)
    env.reset(task)
    while not (step := env.step(Generation((), (), (), WEIRD[0], "eos"))).done:
        pass
    assert step.verdict.outcome == "fail"


class SearchesForever:
    """Asked the question, searches again and again and never answers: the episode is cut. (Its searches
    fold the question out of a small context; the search results that follow say it was asked.)"""

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out = []
        for ids in prompts:
            text = _decode(ids)
            reply = "search: code" if "Question:" in text or "Found:" in text else "ok"
            action = tuple(_encode(reply))
            out.append(Generation(tuple(ids), action, (0.0,) * len(action), reply, "eos"))
        return out


class AnswersWrong:
    """Replies ok to every note and answers the question 0000 (no value: values are 1000-9999)."""

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out = []
        for ids in prompts:
            reply = "0000" if _decode(ids).rstrip().endswith("Answer:") else "ok"
            action = tuple(_encode(reply))
            out.append(Generation(tuple(ids), action, (0.0,) * len(action), reply, "eos"))
        return out


def test_searching_instead_of_answering_is_cut_and_scores_below_a_wrong_answer() -> None:
    """The retrieval tool never ends an episode: a policy that searches instead of answering is cut by
    the step limit, each of its rows scoring the failure floor, below a wrong answer's format credit."""
    from posttrain.train._credit import rewards_of
    from posttrain.verify.rewards import RewardWeights

    tasks = ENV.generate_level(4, level=8, seed=9)
    weights, eps = RewardWeights(format=0.2), {}
    for name, sampler in (("searches", SearchesForever()), ("wrong", AnswersWrong())):
        runs = [(t, RecallEpisode(_encode, _encode), f"{name}{i}", 0) for i, t in enumerate(tasks)]
        eps[name] = run_managed(sampler, runs, SamplingParams(max_new_tokens=200), ContextPolicy(budget=300),
                                _encode, max_turns=40)
    for ep, wrong in zip(eps["searches"], eps["wrong"], strict=True):
        assert not ep.done and not ep.verdicts and ep.cut_by == "max_turns"
        assert sum(r.kind == "search" for r in ep.rows) > 1
        assert wrong.done and wrong.verdicts[-1].error_class == "wrong_answer"
        [floor], _ = rewards_of([ep.trajectories()], weights)
        [paid], _ = rewards_of([wrong.trajectories()], weights)
        assert floor.tolist() == [0.0] * len(ep.rows) and paid.tolist() == [pytest.approx(0.2)] * len(wrong.rows)
