"""The reasoning-gym domains ``rg/<generator>``: all 106 listed without importing reasoning-gym, every
one's references pass and its no-op and exploit fixtures fail, the scorers that passed an exploit
(or ran the answer as code) are held, levels and params configure the generator, canaries.

Every generator runs here once (``test_every_generator``, ~40-80 s on 2 cores); the full domain
conformance suite (tests/envs/test_domains.py) takes a sample of them per run."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from posttrain.envs import HasCanaries, HasCapabilities, HasLevels, domain_names, get_domain, register_domain
from posttrain.envs.conformance import check_parse_errors
from posttrain.envs.rg import GENERATORS, NO_CANARIES
from posttrain.envs.rg._check import extract_answer
from posttrain.envs.rg._domain import respond
from posttrain.errors import TaskError
from posttrain.types import Task

ROOT = Path(__file__).resolve().parents[2]
RG = sorted(n for n in domain_names() if n.startswith("rg/"))


def _verify(pairs: list[tuple[Task, str]]):
    """Verdicts through each domain's own verifier (the shared rg check pool, two workers)."""
    with ThreadPoolExecutor(2) as ex:
        return list(ex.map(lambda p: get_domain(p[0].domain).make_verifier(None)(*p), pairs))


def test_the_table_is_the_installed_reasoning_gym() -> None:
    from reasoning_gym.factory import CURRICULA, DATASETS

    assert len(RG) == len(GENERATORS) == len(DATASETS) == 106
    assert sorted(GENERATORS) == sorted(DATASETS)
    for name, (category, levels) in GENERATORS.items():
        assert DATASETS[name][0].__module__.split(".")[1] == category, name
        assert levels == 0 or name in CURRICULA, name


@pytest.mark.parametrize("name", [n for n, (_, k) in GENERATORS.items() if k])
def test_the_top_level_builds_and_the_next_does_not(name: str) -> None:
    """``levels`` counts the curriculum levels that build and generate: the top one does, the next
    one (where the curriculum has it) fails with one line naming the generator and level."""
    from reasoning_gym.factory import CURRICULA

    from posttrain.envs.rg._config import build_config

    env = get_domain(f"rg/{name}")
    top = env.level_range()[1]
    if name in _SLOW_TOP:
        build_config(name, {"level": top}, seed=5, size=1)
    else:
        (task,) = env.generate_level(1, level=top, seed=5)
        assert task.difficulty == float(top) and task.fields["config"] == {"level": top}
    most = max(len(a.levels) for a in CURRICULA[name]().attributes.values())
    if top + 1 < most:
        with pytest.raises(ValueError) as e:
            _generate_at(name, top + 1)
        assert str(e.value).startswith(f"rg/{name}: level {top + 1}") and "\n" not in str(e.value)


_SLOW_TOP = {"zebra_puzzles"}
"""Its top level takes ~5 s a task on an idle core: only the configuration is built here."""


def _generate_at(name: str, level: int) -> None:
    from posttrain.envs.rg._generate import generate

    generate(name, {"level": level}, n=2, seed=5)


_DIGESTS = """
import hashlib, json, os, sys
out = os.fdopen(os.dup(1), "w"); os.dup2(2, 1)  # what the generators print goes to stderr
from posttrain.envs.rg import GENERATORS
from posttrain.envs.rg._generate import generate, generate_here
def digest(entries): return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:16]
out.write(json.dumps({g: [digest(generate(g, {}, n=2, seed=0)), digest(generate_here(g, {}, n=2, seed=0))]
                      for g in GENERATORS}))
"""


def test_generation_is_the_same_under_every_hash_salt() -> None:
    """Every generator's tasks of one seed, generated in two interpreters whose str hashes are salted
    differently, are the same; generated in-process, exactly the ``HASH_ORDERED`` ones differ (the
    list is neither short nor stale). Two tasks a generator show every ``HASH_ORDERED`` one (four took twice
    the time and found none more). ~15 s. One salt is 0, the one ``_fixed_salt`` pins: that interpreter
    generates the ``HASH_ORDERED`` ones in-process and the other in its child, so the two routes are
    compared too, and five child interpreters (~2 s each) are not started. The other is 2: against 1,
    salt 0's knight_swap and word_ladder searches happen to find the same paths."""
    from posttrain.envs.rg._generate import HASH_ORDERED

    def run(salt: str) -> dict[str, list[str]]:
        out = subprocess.run([sys.executable, "-c", _DIGESTS], capture_output=True, text=True, cwd=ROOT, check=True,
                             env={**os.environ, "PYTHONHASHSEED": salt})
        digests: dict[str, list[str]] = json.loads(out.stdout)
        return digests

    with ThreadPoolExecutor(2) as pool:
        one, two = pool.map(run, ["0", "2"])
    assert len(one) == len(GENERATORS)
    assert [g for g in GENERATORS if one[g][0] != two[g][0]] == []
    assert sorted(g for g in GENERATORS if one[g][1] != two[g][1]) == sorted(HASH_ORDERED)


def test_listing_domains_imports_no_generator() -> None:
    code = ("import sys; from posttrain.envs import domain_names, get_domain; n = domain_names(); "
            "env = get_domain('rg/countdown'); env.level_range(); env.capabilities(); "
            "print(len(n), 'reasoning_gym' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == [str(len(domain_names())), "False"]


def test_rg_names_are_the_namespace_s_alone() -> None:
    with pytest.raises(ValueError, match="domain name 'rg/mine'"):
        register_domain("rg/mine", get_domain("math"))
    with pytest.raises(TaskError, match=r"unknown domain 'rg/countdwn' \(did you mean rg/countdown\?\).*"
                                        r"rg/<generator> \(106 domains\)"):
        get_domain("rg/countdwn")


@pytest.mark.parametrize("domain", RG)
def test_every_generator(domain: str) -> None:
    """6 tasks of seed 0 and 2 of seed 9: references pass, the no-op fails, and every attack of the
    exploit fixtures fails on every one of them (a generator may have several task types, each its
    own answer form: advanced_geometry's orthocenter read the first two items of a list), never an
    infra error (a scorer that raises on an answer is a fail)."""
    from posttrain.envs.rg._fixtures import attacks

    env = get_domain(domain)
    tasks = [*_seed_0_tasks(domain), *env.generate_tasks(2, seed=9)]
    played = [(t, name, response) for i, t in enumerate(tasks)
              for name, response in attacks(env, t, tasks[i + 1:] + tasks[:i])]
    verdicts = _verify([(t, str(t.reference)) for t in tasks] + [(t, env.noop_response(t)) for t in tasks]
                       + [(t, r) for t, _, r in played])
    refs, noops, exploits = verdicts[:len(tasks)], verdicts[len(tasks):2 * len(tasks)], verdicts[2 * len(tasks):]
    assert [v.outcome for v in refs] == ["pass"] * len(tasks), [v.evidence for v in refs if not v.passed]
    assert [v.outcome for v in noops] == ["fail"] * len(tasks)
    assert [(t.id, name, v.outcome) for (t, name, _), v in zip(played, exploits, strict=True)
            if v.outcome != "fail"] == []
    assert len(env.exploit_fixtures()) >= 10
    assert isinstance(env, HasLevels) and isinstance(env, HasCapabilities)
    assert isinstance(env, HasCanaries) == (domain.removeprefix("rg/") not in NO_CANARIES)


@functools.cache
def _seed_0_tasks(domain: str) -> tuple[Task, ...]:
    """6 tasks of seed 0, generated once for ``test_every_generator`` and ``test_code_in_an_answer_never_runs``
    (the second takes the first of them: generating one task of each of 105 generators again took
    ~14 s, most of it the child interpreters of the ``HASH_ORDERED`` ones and codeio)."""
    return tuple(get_domain(domain).generate_tasks(6, seed=0))


MARKER = "posttrain-rg-eval-marker"


def test_code_in_an_answer_never_runs(tmp_path: Path) -> None:
    """Nine scorers evaluate the answer (``eval``, sympy's ``parse_expr``); no rg domain lets one run it.
    The raw string_insertion scorer does run it, so the probe is real."""
    from reasoning_gym.factory import create_dataset

    probe = tmp_path / MARKER
    payload = f"__import__('os').mkdir({str(probe)!r})"
    raw = create_dataset("string_insertion", seed=0, size=1)
    raw.score_answer(payload, raw[0])
    assert probe.is_dir()  # reasoning-gym's own scorer ran the answer
    probe.rmdir()
    tasks = [_seed_0_tasks(d)[0] for d in RG if d != "rg/knight_swap"]
    shapes = (payload, f"[{payload}]", f"{payload} + 1", f"1 + {payload}")
    verdicts = _verify([(t, respond(s)) for t in tasks for s in shapes])
    assert not probe.exists()
    assert {v.outcome for v in verdicts} == {"fail"}


@pytest.mark.parametrize(("generator", "make"), [
    ("game_of_life_halting", lambda t: "any text at all"),
    ("coin_flip", lambda t: "1e308"),  # digits that start like an oracle of 1
    ("complex_arithmetic", lambda t: "nan"),
    ("puzzle24", lambda t: "1*2*3*4"),
    ("gsm_symbolic", lambda t: f"{t.fields['answer']}, 1, 2, 3"),
    ("spell_backward", lambda t: f"{t.fields['answer']}, {t.fields['answer']}"),
    ("word_sorting", lambda t: f"{t.fields['answer']}, zzz"),
    ("sokoban", lambda t: f"the moves are {t.fields['answer']}"),
    ("simple_integration", lambda t: f"{t.fields['answer'][:-4]} + Y**7 + C"),
    ("polynomial_multiplication", lambda t: f"{t.fields['answer']} or 0"),
    ("number_sorting", lambda t: json.dumps([float("nan")] * len(json.loads(t.fields["answer"].replace("'", '"'))))),
    ("number_sorting", lambda t: json.dumps([round(float(x)) for x in json.loads(t.fields["answer"].replace("'", '"'))])),
    ("boxnet", lambda t: _boxnet_sweep(t.prompt)),
    # answers looser than the prompt asks, or of another JSON type
    ("pool_matrix", lambda t: _changed(t, _rows(t.fields["answer"], lambda x: f"{float(x):.1f}"))),  # asks 2 decimals
    ("pool_matrix", lambda t: _changed(t, t.fields["answer"].replace(" ", "\n"))),  # a row of n as a column
    ("decimal_arithmetic", lambda t: _changed(t, f"{float(t.fields['answer']):.3f}")),  # asks 12 digits
    ("number_format", lambda t: _changed(t, f"{float(t.fields['answer']):.2f}")),  # not a candidate
    pytest.param("codeio", lambda t: _changed(t, _json_true_for_one(t.fields["answer"])),  # its generator execs
                 marks=pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")),  # snippets
    ("game_of_life", lambda t: t.fields["answer"].replace("1", "true")),
    ("game_of_life", lambda t: t.fields["answer"][:-1] + "," + json.dumps(json.loads(t.fields["answer"])[0]) + "]"),
    ("graph_color", lambda t: _json_true_for_one(extract_answer(str(t.reference))[0] or "")),
    ("puzzle24", lambda t: _makes_24(t.fields["rg_metadata"]["numbers"], lambda v: 24 < v < 25)),  # int(24.5)
    ("puzzle24", lambda t: _makes_24(t.fields["rg_metadata"]["numbers"], lambda v: v == 24, join=True)),  # 3.5
])
def test_an_answer_raw_reasoning_gym_passes_fails_here(generator: str, make) -> None:
    """Each hardened scorer: the raw reasoning-gym score of the answer is 1, the domain's verdict a fail."""
    from reasoning_gym.factory import create_dataset

    task = next(t for t in _seed_1_tasks(generator) if _raw_passes(generator, t, make(t)))
    raw = create_dataset(generator, seed=1, size=1)
    entry = {"question": task.prompt, "answer": task.fields["answer"], "metadata": task.fields["rg_metadata"]}
    assert raw.score_answer(make(task), entry) >= 1.0
    (verdict,) = _verify([(task, respond(make(task)))])
    assert verdict.outcome == "fail" and verdict.error_class == "wrong_answer", verdict


@functools.cache
def _seed_1_tasks(generator: str) -> tuple[Task, ...]:
    """64 tasks of seed 1, generated once for every case of the generator (puzzle24's three cases took
    ~5 s each, most of it generating them)."""
    return tuple(get_domain(f"rg/{generator}").generate_tasks(64, seed=1))


def _boxnet_sweep(prompt: str) -> str:
    """A boxnet plan that plans nothing: each colour's boxes pushed along a snake through every
    square and back, every agent trying the match after each push (most actions illegal: no box)."""
    import re

    grid = prompt.split("The current left")[1]
    squares = sorted({(float(r), float(c)) for r, c in re.findall(r"Agent\[([\d.]+), ([\d.]+)\]", grid)})
    rows = sorted({r for r, _ in squares})
    snake = [(r, c) for i, r in enumerate(rows) for c in sorted({c for _, c in squares}, reverse=i % 2 == 1)]
    plan: list[dict[str, str]] = []
    for colour in sorted(set(re.findall(r"box_(\w+)", grid))):
        match = {f"Agent[{r}, {c}]": f"move(box_{colour}, target_{colour})" for r, c in snake}
        for way in (snake, snake[::-1]):
            push = {f"Agent[{a[0]}, {a[1]}]": f"move(box_{colour}, square[{b[0]}, {b[1]}])"
                    for a, b in reversed(list(zip(way, way[1:], strict=False)))}
            plan += [match, push] * len(way) + [match]
    return json.dumps(plan, separators=(",", ":"))


def _changed(task: Task, answer: str) -> str:
    """``answer``, or nothing (which no scorer passes) where it is the stored answer after all."""
    return "" if answer.strip() == str(task.fields["answer"]).strip() else answer


def _rows(matrix: str, cell) -> str:
    return "\n".join(" ".join(cell(x) for x in line.split()) for line in matrix.splitlines())


def _json_true_for_one(text: str) -> str:
    """The JSON value with its first 1 written ``true`` (Python's ``True == 1``), or nothing."""
    value, done = json.loads(text), []

    def swap(v):
        if not done and type(v) is int and v == 1:
            done.append(1)
            return True
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        return [swap(x) for x in v] if isinstance(v, list) else v

    out = swap(value)
    return json.dumps(out) if done else ""


def _makes_24(numbers: list[int], good, *, join: bool = False) -> str:
    """An expression of the four numbers whose value passes ``good``; with ``join``, two of them read
    as one decimal (3 and 5 as 3.5). Nothing when there is none."""
    import itertools
    from fractions import Fraction

    items = [str(n) for n in numbers]
    if join:
        pools = [[f"{a}.{b}"] + [n for k, n in enumerate(items) if k not in (i, j)]
                 for (i, a), (j, b) in itertools.permutations(enumerate(items), 2)]
    else:
        pools = [items]
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
           "/": lambda a, b: a / b if b else None}
    for pool in pools:
        for p in itertools.permutations(pool):
            for o in itertools.product(ops, repeat=len(p) - 1):
                value = Fraction(p[0])  # ((a o b) o c) o d, left to right
                for op, x in zip(o, p[1:], strict=True):
                    value = None if value is None else ops[op](value, Fraction(x))
                if value is not None and good(value):
                    expr = p[0]
                    for op, x in zip(o, p[1:], strict=True):
                        expr = f"({expr} {op} {x})"
                    return expr
    return ""


def test_coin_flip_s_rare_events_are_not_zero() -> None:
    """coin_flip's scorer allows 1e-4 absolute: "0" passed every event rarer than that (no heads in 14
    flips, 6.1e-05); the tolerance is relative now, and the stored probability still passes."""
    from reasoning_gym.factory import create_dataset

    env = get_domain("rg/coin_flip")
    task = next(t for t in env.generate_level(60, level=11, seed=0) if float(t.fields["answer"]) < 1e-4)
    entry = {"question": task.prompt, "answer": task.fields["answer"], "metadata": task.fields["rg_metadata"]}
    assert create_dataset("coin_flip", seed=1, size=1).score_answer("0", entry) == 1.0
    verdicts = _verify([(task, respond("0")), (task, str(task.reference)), (task, respond(f"{float(task.fields['answer']):.5g}"))])
    assert [v.outcome for v in verdicts] == ["fail", "pass", "pass"]


def test_countdown_takes_the_given_integers_and_an_exact_value() -> None:
    """countdown's scorer reads the integers of the text (3.5 is the given 3 and 5) and allows 1e-5 of
    the target (1000 - 1/1000 makes 1000): raw reasoning-gym gives each 1.0; both are refused here."""
    from reasoning_gym.factory import create_dataset

    from posttrain.envs.rg._check import score

    raw = create_dataset("countdown", seed=1, size=1)
    for numbers, target, answer in (([3, 5, 2], 7, "3.5*2"), ([1000, 1, 1000], 1000, "1000 - 1/1000")):
        entry = {"question": "q", "answer": answer, "metadata": {"numbers": numbers, "target": target}}
        assert raw.score_answer(answer, entry) == 1.0
        value, refused = score("countdown", {}, answer, entry)
        assert refused is not None or value < 1.0, answer


def _raw_passes(generator: str, task: Task, answer: str) -> bool:
    from reasoning_gym.factory import create_dataset

    entry = {"question": task.prompt, "answer": task.fields["answer"], "metadata": task.fields["rg_metadata"]}
    try:
        return create_dataset(generator, seed=1, size=1).score_answer(answer, entry) >= 1.0
    except Exception:  # noqa: BLE001 - a task this probe does not fit
        return False


def test_gsm_symbolic_s_negative_answers_pass_here_and_fail_raw() -> None:
    """reasoning-gym's gsm_symbolic scorer never reads a leading minus (``\\b-?\\d+``): its own
    reference of a task whose template computes a negative age failed (``tasks validate --all-domains``
    found seed 3's task 14); here it passes, and the positive number it read instead fails."""
    from reasoning_gym.factory import create_dataset

    env = get_domain("rg/gsm_symbolic")
    task = next(t for t in env.generate_tasks(16, seed=3) if str(t.fields["answer"]).startswith("-"))
    entry = {"question": task.prompt, "answer": task.fields["answer"], "metadata": task.fields["rg_metadata"]}
    assert create_dataset("gsm_symbolic", seed=1, size=1).score_answer(str(task.fields["answer"]), entry) < 1.0
    flipped = str(task.fields["answer"]).lstrip("-")
    assert [v.outcome for v in _verify([(task, str(task.reference)), (task, respond(flipped))])] == ["pass", "fail"]


def test_partial_credit_is_recorded_not_rewarded() -> None:
    """caesar_cipher's scorer gives the reference in prose about 0.7 (``len(oracle)/len(answer)``)."""
    task = get_domain("rg/caesar_cipher").generate_tasks(1, seed=0)[0]
    (v,) = _verify([(task, respond(f"I believe it reads {task.fields['answer']}"))])
    assert v.outcome == "fail" and v.reward == 0.0 and 0.3 < v.evidence["rg_score"] < 1.0
    assert v.components["outcome"] == 0.0 and v.components["format"] == 1.0


def test_answer_extraction_is_strict() -> None:
    assert extract_answer("so <answer> 7 </answer>.") == ("7", None)
    assert extract_answer("7")[0] is None
    assert extract_answer("<answer>1</answer> or <answer>2</answer>")[0] is None
    assert extract_answer("</answer>1<answer>")[0] is None
    assert extract_answer("<answer> </answer>")[1] == "the answer block is empty"
    assert extract_answer("<answer></answer>", empty_ok=True) == ("", None)


def test_levels_params_and_their_errors() -> None:
    env = get_domain("rg/basic_arithmetic")
    assert env.level_range() == (0, 4)
    easy, hard = env.generate_level(20, level=0, seed=3), env.generate_level(20, level=4, seed=3)
    assert {t.difficulty for t in easy} == {0.0} and {t.difficulty for t in hard} == {4.0}
    assert sum(len(t.prompt) for t in easy) < sum(len(t.prompt) for t in hard)
    fixed = env.generate_params(5, seed=3, params={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1})
    assert all(t.fields["rg_metadata"]["num_terms"] == 2 for t in fixed) and fixed[0].id.startswith("rg-basic_arithmetic-p")
    with pytest.raises(ValueError) as e:
        env.generate_params(1, params={"min_termz": 2})
    assert "params: unknown field(s) ['min_termz']" in str(e.value) and "min_terms" in str(e.value)
    with pytest.raises(ValueError, match="params.seed: set by the task source"):
        env.generate_params(1, params={"seed": 2})
    with pytest.raises(ValueError, match=r"rg/basic_arithmetic: params \{'min_terms': 9, 'max_terms': 2\}: "
                                         r"the generator refuses its configuration"):
        env.generate_params(1, params={"min_terms": 9, "max_terms": 2})
    words = get_domain("rg/word_sorting").generate_params(3, params={"transformation": "uppercase"})
    assert all(t.fields["answer"] == t.fields["answer"].upper() for t in words)
    with pytest.raises(ValueError, match="params.transformation: expected one of"):
        get_domain("rg/word_sorting").generate_params(1, params={"transformation": "shouting"})


def test_composite_mixes_generators_and_keeps_their_rules() -> None:
    env = get_domain("rg/composite")
    mixed = env.generate_params(12, seed=2, params={"datasets": [
        {"name": "game_of_life_halting", "weight": 1, "config": {}},
        {"name": "spell_backward", "weight": 1, "config": {}}]})
    sources = {t.fields["rg_metadata"]["source_dataset"] for t in mixed}
    assert sources == {"game_of_life_halting", "spell_backward"}
    halting = next(t for t in mixed if t.fields["rg_metadata"]["source_dataset"] == "game_of_life_halting")
    refs = _verify([(t, str(t.reference)) for t in mixed] + [(halting, respond("any text"))])
    assert [v.outcome for v in refs] == ["pass"] * len(mixed) + ["fail"]


def test_generators_without_a_stored_answer_check_with_their_verifier() -> None:
    from reasoning_gym.factory import create_dataset

    for name in ("boxnet", "graph_color", "propositional_logic", "rubiks_cube", "rush_hour"):
        (task,) = get_domain(f"rg/{name}").generate_tasks(1, seed=4)
        assert task.fields["answer"] is None and task.reference is not None
        raw = create_dataset(name, seed=4, size=1)
        entry = {"question": task.prompt, "answer": None, "metadata": _raw_metadata(name, task)}
        # propositional_logic's reference may be one variable, which its scorer takes as a valid but
        # trivial conclusion (0.25): what follows only from two premises together is no trivial one
        least = 0.25 if name == "propositional_logic" else 1.0
        assert raw.score_answer(task.reference[len("<answer>"):-len("</answer>")], entry) >= least, name


def test_propositional_logic_asks_for_a_conclusion_that_needs_the_premises_together() -> None:
    """The generator's scorer passed the premises joined by ∧ on every task and a premise restated on
    most; here each is a wrong answer, and a clause drawn from two premises passes (modus ponens,
    resolution), written with or without brackets. Every task's reference is one such clause, the
    shortest, and its question says what is asked."""
    from reasoning_gym.factory import create_dataset

    from posttrain.envs.rg._check import score
    from posttrain.envs.rg._hardened import PL_ASK

    env = get_domain("rg/propositional_logic")
    tasks = env.generate_tasks(24, seed=2)
    raw = create_dataset("propositional_logic", seed=2, size=1)
    joined = 0
    for t in tasks:
        assert t.prompt.endswith(PL_ASK)
        entry = {"question": t.prompt, "answer": None, "metadata": t.fields["rg_metadata"]}
        premises = t.fields["rg_metadata"]["premises"]
        conj = f"({' ∧ '.join(premises)})"
        joined += raw.score_answer(conj, entry) == 1.0
        assert score("propositional_logic", {}, conj, entry)[0] == 0.0
        for p in premises:
            assert score("propositional_logic", {}, p, entry)[0] == 0.0, (p, premises)
    assert joined == len(tasks)  # the generator's own scorer: every task passed by the premises joined
    meta = {"premises": ["P", "(P → Q)", "(¬Q ∨ R)"], "variables": ["P", "Q", "R"]}
    entry = {"question": "", "answer": None, "metadata": meta}
    verdicts = {a: score("propositional_logic", {}, a, entry)[0]
                for a in ("Q", "R", "(Q)", "(Q ∨ R)", " ( ¬P ∨ R ) ", "P", "(¬P ∨ Q)", "(P ∨ ¬P)", "(Q ∧ R)",
                          "(Q ∨ S)", "¬¬Q", "Q ∨", "(P → Q)")}
    assert verdicts == {"Q": 1.0, "R": 1.0, "(Q)": 1.0, "(Q ∨ R)": 1.0, " ( ¬P ∨ R ) ": 1.0,  # all need two
                        "P": 0.0, "(¬P ∨ Q)": 0.0,  # a premise restated
                        "(P ∨ ¬P)": 0.0, "(Q ∧ R)": 0.0, "(Q ∨ S)": 0.0, "¬¬Q": 0.0, "Q ∨": 0.0, "(P → Q)": 0.0}
    contradictory = {"question": "", "answer": None, "metadata": {"premises": ["P", "¬P"], "variables": ["P", "Q"]}}
    assert score("propositional_logic", {}, "Q", contradictory)[0] == 0.0
    with pytest.raises(ValueError, match=r"^rg/propositional_logic: level 0: expected a level in \[1, 4\]$"):
        env.generate_level(1, level=0)
    assert env.level_range() == (1, 4)


def _raw_metadata(name: str, task: Task) -> dict:
    """The generator's own metadata of ``task`` (regenerated from its seed: the stored one is JSON)."""
    from reasoning_gym.factory import create_dataset

    from posttrain.envs.rg._generate import rg_seed

    seed = int(task.id.rsplit("-", 2)[1])
    return create_dataset(name, seed=rg_seed(name, {}, seed), size=1)[0]["metadata"]


def test_canaries_fail_their_honest_answer_and_trip_a_planted_exploit() -> None:
    env = get_domain("rg/spell_backward")
    canaries = env.canary_tasks(4, seed=0)
    assert len(canaries) == 4 and all("canary" in t.tags and t.reference is None for t in canaries)
    from posttrain.envs.rg._generate import generate

    sources = {e["question"]: e for e in generate("spell_backward", {}, n=32, seed=0, salt="canary")}
    honest = _verify([(c, respond(sources[c.prompt]["reference"])) for c in canaries])
    assert {v.outcome for v in honest} == {"fail"}
    record = json.loads(json.dumps(_record(canaries[0])))
    assert env.parse_task(record, "canary file") == canaries[0]
    assert not isinstance(get_domain("rg/game_of_life_halting"), HasCanaries)  # True/False: a guess is a pass


@pytest.mark.parametrize("name", ["syllogism", "count_bits", "gcd", "spell_backward", "basic_arithmetic", "countdown"])
def test_generators_without_canaries_are_the_ones_with_few_answers(name: str) -> None:
    from posttrain.envs.rg._domain import VARIED
    from posttrain.envs.rg._generate import generate

    answers = {e["reference"] for e in generate(name, {}, n=32, seed=0, salt="canary")}
    assert (len(answers) < VARIED * 32) == (name in NO_CANARIES)


def _record(task: Task) -> dict:
    from posttrain.envs import task_to_record

    return task_to_record(task)


def test_a_bad_record_names_its_field() -> None:
    env = get_domain("rg/countdown")
    assert check_parse_errors(env) == []
    (task,) = env.generate_tasks(1)
    record = {**_record(task), "config": {"level": 99}}
    with pytest.raises(TaskError, match=r"field 'config': expected level: an integer in \[0, 4\]"):
        env.parse_task(record, "mine.jsonl:3")


@pytest.mark.parametrize("module", ["posttrain.envs.rg", "posttrain.envs.rg._check", "posttrain.envs.rg._solvers"])
def test_docstring_examples(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0


def test_knight_swap_answers_that_do_not_solve_the_board_fail() -> None:
    """A policy on knight_swap (whose references now come from a fixed-salt child): "No" on a board that
    can be swapped, the reference with a move undone and redone (legal, solved, longer than optimal:
    the scorer's partial credit), the reference less its last move (legal, unsolved: 0.05), and the
    reference of a board with another question - each a fail, never a pass or an infra error."""
    env = get_domain("rg/knight_swap")
    tasks = [t for t in env.generate_tasks(8, seed=3) if t.fields["rg_metadata"]["is_possible"]]
    task = tasks[0]
    other = next(t for t in tasks if t.prompt != task.prompt and t.reference != task.reference)
    moves = json.loads(extract_answer(str(task.reference))[0] or "[]")
    color, start, end = moves[0].split(",")
    back = f"{'B' if color == 'w' else 'w'},{moves[1].split(',')[1]},{moves[1].split(',')[2]}"
    padded = [moves[0], moves[1], f"{color},{end},{start}", f"{back.split(',')[0]},{back.split(',')[2]},"
              f"{back.split(',')[1]}", *moves]
    responses = [respond("No"), respond(json.dumps(padded)), respond(json.dumps(moves[:-1])), str(other.reference)]
    verdicts = _verify([(task, str(task.reference))] + [(task, r) for r in responses])
    assert verdicts[0].outcome == "pass"
    assert [v.outcome for v in verdicts[1:]] == ["fail"] * 4, [v.feedback for v in verdicts[1:]]
    # the longer and the unsolved lists are legal: the scorer's partial credit, never the reward
    assert 0.05 < verdicts[2].evidence["rg_score"] < 1 and verdicts[3].evidence["rg_score"] == 0.05
