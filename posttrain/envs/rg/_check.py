"""The rg domains' check, run in a worker process under a CPU budget (``posttrain.verify._deadline``).

One request is one response to one task: ``{"generator", "spec", "question", "answer", "metadata",
"response"}``. The check, in order (each failure a ``fail``, reward 0):

1. exactly one ``<answer>...</answer>`` block in the response, not empty after stripping, at most
   ``MAX_ANSWER_CHARS`` characters -> else ``format`` (two blocks is a hedge: reasoning-gym's own
   ``extract_answer`` takes the last one, so a list of tries would score its best);
2. the generator's ``score_answer(answer, entry)`` on the entry rebuilt from the task (question,
   stored answer, metadata), by a dataset object configured as the task says (``_config.py``);
   a scorer that raises on the answer is the answer's failure (``exception:<Type>``), one that
   uses up the CPU budget is ``timeout``;
3. the reward is 1 only for a full score (``score >= 1``): partial credit is never reward. The
   scorers' partial scores reward what a policy would try first (the default scorer gives
   ``len(oracle) / len(answer)`` to any answer containing the oracle, so the reference buried in
   every other option scores 0.1-0.7; a wrong format gets 0.01-0.05; a coin_flip probability
   that starts with the oracle's digits gets 1.0 by its prefix rule), so the partial score is
   kept in ``evidence.rg_score`` for analysis and the reward is binary;
4. a wrong answer to a task of a generator whose answers are few (``_names.FEW_ANSWERS``: Yes/No,
   True/False, on/off/undetermined, small counts) ends a repair episode (``evidence["final"]``,
   ``Verdict.ends_repair``): told "wrong", the answer is among the few left, and cycling them blind
   passed every repair episode with as many attempts as answers (a composite's task: the generator it
   came from decides; a format failure, which says nothing of the answer, is still repaired);
5. ``HARDENED`` generators (``_hardened.py``) whose scorer gives a full score to an answer that is
   not one (every option at once, any non-empty text, the reference followed by more) check that
   answer again with a stricter rule of their own, or replace the scorer.

Feedback says what failed, never the expected answer (a repair round must not read it off).
Not here: parsing tasks or rendering prompts (``_domain.py``).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any

from posttrain.envs._base import fail, passed
from posttrain.envs.rg._hardened import EMPTY_ANSWERS, HARDENED, Rule
from posttrain.envs.rg._names import FEW_ANSWERS
from posttrain.strict_json import after_reasoning

OPEN, CLOSE = "<answer>", "</answer>"
MAX_ANSWER_CHARS = 65_536
"""The longest answer checked: above the longest reference of any generator at its top level (the
longest was game_of_life's 100x100 grid, ~20,000 characters, until its levels stopped at 0); a longer
one is ``format``."""


def extract_answer(response: str, *, empty_ok: bool = False) -> tuple[str | None, str | None]:
    """The content of the single ``<answer>...</answer>`` block, stripped, or ``(None, reason)``;
    an empty one only where the generator's right answer can be empty (``empty_ok``).

    >>> extract_answer("I think <answer> 42 </answer>")
    ('42', None)
    >>> extract_answer("<answer>1</answer><answer>2</answer>")[1]
    'found 2 <answer> and 2 </answer> tags; exactly one answer block is allowed'
    """
    opens, closes = response.count(OPEN), response.count(CLOSE)
    if opens == 0 and closes == 0:
        return None, "no <answer>...</answer> block found"
    if opens != 1 or closes != 1:
        return None, f"found {opens} {OPEN} and {closes} {CLOSE} tags; exactly one answer block is allowed"
    start, end = response.index(OPEN) + len(OPEN), response.index(CLOSE)
    if end < start:
        return None, f"{CLOSE} comes before {OPEN}"
    answer = response[start:end].strip()
    if not answer and not empty_ok:
        return None, "the answer block is empty"
    if len(answer) > MAX_ANSWER_CHARS:
        return None, f"the answer has {len(answer)} characters; at most {MAX_ANSWER_CHARS} are checked"
    return answer, None


def warm_up() -> None:
    """Import reasoning-gym (about a second) before the worker says it is ready."""
    import reasoning_gym  # noqa: F401


@functools.lru_cache(maxsize=64)
def _dataset(name: str, spec_json: str) -> Any:
    """A dataset object of ``name`` configured as the task says (its scorer reads the config)."""
    from reasoning_gym.factory import DATASETS

    from posttrain.envs.rg._config import build_config

    dataset_cls, _ = DATASETS[name]
    return dataset_cls(config=build_config(name, json.loads(spec_json), seed=0, size=1))


def score(name: str, spec: Mapping[str, Any], answer: str, entry: Mapping[str, Any]) -> tuple[float, str | None]:
    """``(score, refusal)``: the generator's score of ``answer`` and, when that is full, why a
    hardened generator refuses it anyway (None: it stands). Raises what the scorer raises."""
    dataset = _dataset(name, json.dumps(dict(spec), sort_keys=True))
    entry = json.loads(json.dumps(dict(entry)))  # the scorer may change it; never the caller's copy
    rule = rule_of(name, entry)
    if name == "composite":  # it forwards to the dataset the entry came from: that one's rule holds
        dataset = dataset.datasets[entry["metadata"]["source_dataset"]]
    if rule.before is not None and (refusal := rule.before(dataset, answer, entry)) is not None:
        return 0.0, refusal
    value = float(rule.replace(dataset, answer, entry) if rule.replace is not None
                  else dataset.score_answer(answer, entry))
    if not math.isfinite(value):
        return 0.0, f"the scorer returned {value}"
    if value >= 1.0 and rule.check is not None:
        return value, rule.check(dataset, answer, entry)
    return value, None


def rule_of(name: str, entry: Mapping[str, Any]) -> Rule:
    """The rule that holds for ``entry`` (a composite's entry: that of the generator it came from)."""
    source = entry["metadata"].get("source_dataset", name) if name == "composite" else name
    return HARDENED.get(source, _NO_RULE)


_NO_RULE = Rule()


def reference_problem(name: str, spec: Mapping[str, Any], entry: Mapping[str, Any]) -> str | None:
    """Why ``entry``'s own reference would fail the check a response to its task gets (None: it
    passes): generation keeps no entry it names (``_generate._kept``). A scorer that raises on the
    reference is a reason too. Runs in the generating process, without the worker's CPU budget.

    >>> reference_problem("jugs", {}, {"question": "", "answer": None, "metadata": {}, "reference": ""})
    'format: the answer block is empty'
    """
    request = {"generator": name, "spec": dict(spec), "question": entry["question"], "answer": entry["answer"],
               "metadata": entry["metadata"], "response": f"{OPEN}{entry['reference']}{CLOSE}"}
    try:
        verdict = handle_check(request)
    except Exception as e:  # noqa: BLE001 - the scorer's failure on the reference, said as the reason
        return f"the scorer raised {type(e).__name__}"
    if verdict["outcome"] == "pass":
        return None
    evidence = verdict["evidence"]
    detail = evidence.get("reason") or evidence.get("refused") or f"score {evidence.get('rg_score')}"
    return f"{verdict['error_class']}: {detail}"


def handle_check(request: Mapping[str, Any]) -> dict[str, Any]:
    """The worker side of the rg verifier: one request in, one verdict (as JSON) out."""
    name = request["generator"]
    source = request["metadata"].get("source_dataset", name) if name == "composite" else name
    answer, problem = extract_answer(after_reasoning(request["response"]), empty_ok=source in EMPTY_ANSWERS)
    if answer is None:
        return fail(f"Answer format: {problem}. Give your final answer as <answer>...</answer>, once.", "format",
                    {"reason": problem, "generator": name}).to_json()
    entry = {"question": request["question"], "answer": request["answer"], "metadata": request["metadata"]}
    value, refusal = score(name, request["spec"], answer, entry)
    evidence = {"generator": name, "answer": answer[:400], "rg_score": round(value, 6)}
    if value >= 1.0 and refusal is None:
        return passed("Correct.", evidence).to_json()
    if refusal is not None:
        evidence["refused"] = refusal
    if source in FEW_ANSWERS:
        evidence["final"] = True  # Verdict.ends_repair: told wrong, the answer is among the few left
    return fail("Wrong answer.", "wrong_answer", evidence, {"format": 1.0}).to_json()
