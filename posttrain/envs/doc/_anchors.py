"""FinQA's execution accuracy and TAT-QA's exact match / F1, as their official evaluators compute them,
and loaders that turn a user's FinQA or TAT-QA JSON into doc tasks.

Written from the published rules (FinQA: Chen et al. 2021, its ``evaluate.py``; TAT-QA: Zhu et al.
2021, ``tatqa_metric.py`` and ``tatqa_utils.py``), not copied; each departure is named here:

- ``finqa_execute(program, table)``: the FinQA DSL (``add subtract multiply divide exp greater`` and
  ``table_max table_min table_sum table_average`` over a row, ``#n`` for step n's result, ``const_100``,
  ``const_m1``), in floats as FinQA runs it, the result rounded to 5 decimals (``greater`` gives
  ``"yes"``/``"no"``); ``None`` for a program FinQA would mark invalid. Never ``eval``.
- ``finqa_execution_accuracy``: the share of examples whose predicted program (or number, rounded to 5
  decimals, or ``yes``/``no``: what a program's ``greater`` gives) executes to the gold program's result.
- ``tatqa_em_f1(prediction, pred_scale, gold_qa)``: TAT-QA's normalisation (lower case, punctuation and
  articles dropped, numbers read with their scale words, parentheses as minus, ``%`` as 0.01) and
  answer strings (numbers rounded to 2 places, times the scale), exact match over the set of spans and
  F1 over the optimal one-to-one alignment of span bags; arithmetic and count answers have F1 = EM.
  The alignment is exact (bitmask dynamic programming up to 12 spans a side, greedy beyond) where
  TAT-QA calls ``scipy.optimize.linear_sum_assignment``: both maximise the total, which is all the mean
  depends on.
- ``load_finqa`` / ``load_tatqa``: each question becomes a doc task (the context as one page of
  Markdown, the table as Table 1); its evidence is the cells and sentences holding the numbers its gold
  program or derivation uses (numbers found nowhere are left out; a question without any is judged on
  its conclusion alone).
"""

from __future__ import annotations

import json
import math
import re
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------- FinQA

FINQA_OPS = ("add", "subtract", "multiply", "divide", "exp", "greater", "table_max", "table_min", "table_sum",
             "table_average")
_STEP_RE = re.compile(r"\s*([a-z_]+)\(([^()]*)\)\s*(?:,|$)")


def finqa_number(text: str) -> float | None:
    """A FinQA argument or cell as a number: commas dropped, ``%`` divides by 100, ``const_m1`` is -1.

    >>> finqa_number("1,234"), finqa_number("5%"), finqa_number("const_m1"), finqa_number("n/a")
    (1234.0, 0.05, -1.0, None)
    """
    text = text.replace(",", "")
    try:
        return float(text)
    except ValueError:
        pass
    try:
        if "%" in text:
            return float(text.replace("%", "")) / 100.0
        if "const" in text:
            value = text.replace("const_", "")
            return float("-1" if value == "m1" else value)
    except ValueError:
        return None
    return None


def finqa_is_program(program: str) -> bool:
    """Whether ``program`` is a sequence of FinQA steps ``op(arg1, arg2)`` with known ops.

    >>> finqa_is_program("subtract(5, 3), divide(#0, 3)"), finqa_is_program("__import__('os')")
    (True, False)
    """
    pos, text, steps = 0, program.strip(), 0
    while pos < len(text):
        m = _STEP_RE.match(text, pos)
        if m is None or m.group(1) not in FINQA_OPS or len(m.group(2).split(",")) != 2:
            return False
        pos, steps = m.end(), steps + 1
    return steps > 0


def _cell_number(cell: str) -> float | None:
    return finqa_number(cell.replace("$", "").strip().split("(")[0].strip())


def finqa_execute(program: str, table: Sequence[Sequence[str]] | None = None) -> float | str | None:
    """Run a FinQA program (the module docstring); None when FinQA would call it invalid.

    >>> finqa_execute("subtract(5829, 5735), divide(#0, 5735)")
    0.01639
    >>> finqa_execute("table_sum(revenue, none)", [["", "2019", "2018"], ["revenue", "$ 10", "$ 5"]])
    15.0
    """
    results: list[float | str] = []
    pos, text = 0, program.strip()
    rows = {str(r[0]): list(r[1:]) for r in (table or []) if r}
    try:
        while pos < len(text):
            m = _STEP_RE.match(text, pos)
            if m is None or m.group(1) not in FINQA_OPS:
                return None
            pos = m.end()
            args = [a.strip() for a in m.group(2).split(",")]
            if len(args) != 2:
                return None
            results.append(_finqa_step(m.group(1), args, results, rows))
    except (ValueError, ArithmeticError, IndexError, TypeError, OverflowError):
        return None
    if not results:
        return None
    last = results[-1]
    return last if isinstance(last, str) else round(last, 5)


def _finqa_step(op: str, args: list[str], results: list[float | str], rows: dict[str, list[str]]) -> float | str:
    if op.startswith("table_"):
        if args[0] not in rows:
            raise ValueError("no such row")
        cells = [_cell_number(c) for c in rows[args[0]]]
        if not cells or any(c is None for c in cells):
            raise ValueError("a cell is not a number")
        nums = [float(c) for c in cells if c is not None]
        return {"table_max": max, "table_min": min, "table_sum": sum}.get(op, lambda v: sum(v) / len(v))(nums)
    a, b = (_finqa_arg(x, results) for x in args)
    if op == "greater":
        return "yes" if a > b else "no"
    if op == "exp":
        if abs(b) > 1000:
            raise OverflowError("exponent too large")
        return a ** b
    return {"add": a + b, "subtract": a - b, "multiply": a * b}[op] if op != "divide" else a / b


def _finqa_arg(arg: str, results: list[float | str]) -> float:
    if arg.startswith("#"):
        value = results[int(arg[1:])]
        if isinstance(value, str):
            raise TypeError("a yes/no result used as a number")
        return value
    value = finqa_number(arg)
    if value is None:
        raise ValueError(f"not a number: {arg!r}")
    return value


def finqa_exe_match(prediction: str | float | int, gold: float | str, table: Sequence[Sequence[str]] | None = None) -> bool:
    """FinQA's execution match: ``prediction`` (a program, a number, or ``yes``/``no`` for a comparison)
    executes to ``gold`` (a gold program's result, or the example's ``exe_ans``), both rounded to 5 decimals.

    >>> finqa_exe_match("divide(10, 3)", 3.33333), finqa_exe_match(3.333334, 3.33333), finqa_exe_match(3.3334, 3.33333)
    (True, True, False)
    """
    if isinstance(prediction, str):
        word = prediction.strip().lower()
        got = word if word in ("yes", "no") else finqa_execute(prediction, table)
    else:
        got = round(float(prediction), 5) if isinstance(prediction, int | float) and math.isfinite(prediction) else None
    want = gold if isinstance(gold, str) else round(float(gold), 5)
    return got is not None and got == want


def finqa_execution_accuracy(predictions: Mapping[str, str | float], examples: Sequence[Mapping[str, Any]]) -> float:
    """FinQA's execution accuracy over ``examples`` (FinQA JSON records): an example scores when its
    ``id``'s prediction executes to its gold program's result (or ``exe_ans``); a missing one does not."""
    if not examples:
        return 0.0
    hits = 0
    for ex in examples:
        qa, table = ex["qa"], ex.get("table", [])
        gold = finqa_execute(qa["program"], table) if qa.get("program") else None
        if gold is None:
            gold = qa["exe_ans"]
        if ex["id"] in predictions and finqa_exe_match(predictions[ex["id"]], gold, table):
            hits += 1
    return hits / len(examples)


# ---------------------------------------------------------------- TAT-QA

_NOT_IN_NUMBERS = set("'\"\\$€£¥%(),[]")
_PUNCT = set(string.punctuation)


def tatqa_scale_factor(scale: str) -> float:
    """TAT-QA's scale word as a factor (``thousand`` 1000, ``percent`` 0.01, anything else 1).

    >>> tatqa_scale_factor("million"), tatqa_scale_factor("percent"), tatqa_scale_factor("")
    (1000000, 0.01, 1)
    """
    scale = scale.lower()
    for word, factor in (("hundred", 100), ("thousand", 1000), ("million", 1_000_000), ("billion", 1_000_000_000)):
        if word in scale:
            return factor
    return 0.01 if "percent" in scale else 1


def _clean(text: str) -> str:
    return "".join(c for c in str(text) if c not in _NOT_IN_NUMBERS)


def tatqa_is_number(text: str) -> bool:
    words = " ".join(_clean(w) for w in text.split()).split()
    if not words:
        return False
    try:
        value = float(words[0])
    except ValueError:
        return False
    if math.isnan(value):
        return False
    return not (len(words) >= 2 and tatqa_scale_factor(words[1]) == 1)


_INT_DIGITS = 100
"""The longest run of digits ``tatqa_to_number`` reads as an int (TAT-QA's numbers are far shorter)."""


def tatqa_to_number(text: str) -> float | None:
    """A number in TAT-QA's reading: its first number, times a scale word after it, negative in
    parentheses, a percent as 0.01; rounded to 4 places.

    >>> tatqa_to_number("(134)"), tatqa_to_number("12.5%"), tatqa_to_number("3 million")
    (-134, 0.125, 3000000)
    """
    m = re.search(r"([+-]?\d+(\.\d+)?)|([+-]?\.\d+)", _clean(text))
    if m is None or not m.group(0):
        return None
    digits = m.group(0)
    # a run of more than _INT_DIGITS digits is read as a float (inf past ~308): as an int, one past 4,300
    # digits raised ValueError, and one past ~300 OverflowError times a scale or a percent, out of the check
    num: float = float(digits) if "." in digits or len(digits.lstrip("+-")) > _INT_DIGITS else int(digits)
    # TAT-QA's patterns, each anchored at the start of its run of digits ((?<!...)): the same first match,
    # in linear time; unanchored, a search retries inside the run, quadratic in a response's 20k-digit token
    scaled = re.search(r"(?<![\d.])[\d.]+\s?[a-zA-Z]+", text)
    factor = tatqa_scale_factor(scaled.group(0).lower()) if scaled else 1
    negative = -1 if re.search(r"\([\d.\s]+\)", text.strip()) else 1
    percent = 0.01 if re.search(r"(?<![\d.\s])[\d.\s]+%", text.strip()) else 1
    return round(num * factor * negative * percent, 4)


def tatqa_normalize(text: str) -> str:
    """TAT-QA's answer normalisation, token by token (split on single spaces).

    >>> tatqa_normalize("The  Cloud segment."), tatqa_normalize("$1,234")
    ('cloud segment', '1234')
    """
    parts = []
    for token in text.split(" "):
        token = token.lower()
        if not tatqa_is_number(token):
            token = "".join(c for c in token if c not in _PUNCT)
        if tatqa_is_number(token):
            number = tatqa_to_number(token)
            token = str(number) if number is not None else token
        token = " ".join(re.sub(r"\b(a|an|the)\b", " ", token).split())
        if token.strip():
            parts.append(token)
    return " ".join(parts).strip()


def tatqa_answer_strings(answers: Sequence[Any], scale: str) -> list[str]:
    """TAT-QA's answer string: each answer (sorted) as a number rounded to 2 places times the scale
    (``%.4f``), or with the scale word appended; joined by spaces."""
    out = []
    try:
        ordered = sorted(answers)
    except TypeError:  # mixed types: TAT-QA's own sort would raise here
        ordered = sorted(answers, key=str)
    for ans in ordered:
        text = str(ans)
        if tatqa_is_number(text):
            number = tatqa_to_number(text)
            if number is None:
                text = f"{text} {scale}" if scale else text
            elif "%" in text:
                text = f"{number:.4f}"
            else:
                text = "%.4f" % (round(number, 2) * tatqa_scale_factor(scale))
        elif scale:
            text = f"{text} {scale}"
        out.append(text)
    return [" ".join(out)]


def _f1(pred: set[str], gold: set[str]) -> float:
    inter = len(gold & pred)
    precision = 1.0 if not pred else inter / len(pred)
    recall = 1.0 if not gold else inter / len(gold)
    return 0.0 if precision == 0.0 and recall == 0.0 else 2 * precision * recall / (precision + recall)


def _best_alignment(scores: list[list[float]]) -> float:
    """The largest total of a one-to-one assignment of rows to columns (rectangular allowed)."""
    if not scores or not scores[0]:
        return 0.0
    rows, cols = len(scores), len(scores[0])
    if rows < cols:
        scores = [list(c) for c in zip(*scores, strict=True)]
        rows, cols = cols, rows
    if cols > 12:  # greedy beyond what the exact search affords; TAT-QA answers have a handful of spans
        used, total = set(), 0.0
        for row in scores:
            j = max((j for j in range(cols) if j not in used), key=lambda j: row[j], default=None)
            if j is not None:
                used.add(j)
                total += row[j]
        return total
    best = {0: 0.0}  # mask of used columns -> best total so far
    for row in scores:
        nxt = dict(best)
        for mask, total in best.items():
            for j in range(cols):
                if not mask & (1 << j):
                    key = mask | (1 << j)
                    nxt[key] = max(nxt.get(key, -1.0), total + row[j])
        best = nxt
    return max(best.values())


def tatqa_metrics(predicted: str | Sequence[str], gold: str | Sequence[str]) -> tuple[float, float]:
    """TAT-QA's ``get_metrics``: exact match over the normalised spans, F1 over aligned bags (2 places).

    >>> tatqa_metrics(["New York", "Paris"], ["paris", "new york"])
    (1.0, 1.0)
    """
    pred = [tatqa_normalize(s) for s in ([predicted] if isinstance(predicted, str) else predicted)]
    want = [tatqa_normalize(s) for s in ([gold] if isinstance(gold, str) else gold)]
    em = 1.0 if set(pred) == set(want) and len(pred) == len(want) else 0.0
    pred_bags, gold_bags = [set(s.split()) for s in pred], [set(s.split()) for s in want]
    scores = [[_f1(p, g) for p in pred_bags] for g in gold_bags]
    f1 = _best_alignment(scores) / max(len(gold_bags), len(pred_bags), 1)
    return em, round(f1, 2)


def tatqa_em_f1(prediction: str | Sequence[str] | float, pred_scale: str, gold_qa: Mapping[str, Any]) -> tuple[float, float]:
    """One prediction's exact match and F1 against a TAT-QA question record, as ``TaTQAEmAndF1`` scores it.

    >>> q = {"answer": 25.5, "answer_type": "arithmetic", "scale": "percent"}
    >>> tatqa_em_f1("25.5", "percent", q), tatqa_em_f1("0.255", "", q), tatqa_em_f1("25.5", "", q)
    ((1.0, 1.0), (1.0, 1.0), (0.0, 0.0))
    """
    if not prediction:  # as TAT-QA: an empty (or zero) prediction scores 0
        return 0.0, 0.0
    answer_type, scale, content = gold_qa["answer_type"], gold_qa.get("scale", ""), gold_qa["answer"]
    if answer_type in ("span", "multi-span"):
        gold_answers = list(content)
    elif answer_type == "count":
        gold_answers = [str(int(content))]
    else:
        gold_answers = [str(content)]
    if not gold_answers:
        return 0.0, 0.0
    preds = list(prediction) if isinstance(prediction, list | tuple) else [prediction]
    pred_strings = tatqa_answer_strings(preds, pred_scale)
    if len(preds) == 1 and not pred_scale and "%" not in str(preds[0]) and tatqa_is_number(str(preds[0])):
        number = tatqa_to_number(str(preds[0]))
        if number is not None:
            pred_strings.append(f"{number:.4f}")
    em, f1 = max(tatqa_metrics(p, g) for p in pred_strings for g in tatqa_answer_strings(gold_answers, scale))
    return (em, em) if answer_type in ("arithmetic", "count") else (em, f1)


def tatqa_scores(predictions: Mapping[str, Sequence[Any]], dataset: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """TAT-QA's overall exact match, F1 and scale accuracy: ``predictions`` maps a question uid to
    ``[answer, scale]`` (TAT-QA's prediction file); a question with no prediction scores 0."""
    em = f1 = scale_hits = 0.0
    count = 0
    for context in dataset:
        for qa in context["questions"]:
            count += 1
            answer, scale = predictions.get(qa["uid"], ["", ""])
            scale_hits += scale == qa.get("scale", "")
            e, f = tatqa_em_f1(answer, scale, qa)
            em, f1 = em + e, f1 + f
    n = max(count, 1)
    return {"em": em / n, "f1": f1 / n, "scale": scale_hits / n, "questions": float(count)}


# ---------------------------------------------------------------- loaders: FinQA / TAT-QA JSON -> doc tasks


def _unique(names: Sequence[str], blank: str) -> list[str]:
    out, seen = [], set()
    for i, name in enumerate(names):
        base = " ".join(str(name).split()).replace("|", "/") or f"{blank} {i + 1}"
        key, k = base, 2
        while key.casefold() in seen:
            key, k = f"{base} ({k})", k + 1
        seen.add(key.casefold())
        out.append(key)
    return out


def context_markdown(before: Sequence[str], table: Sequence[Sequence[str]], after: Sequence[str]) -> tuple[str, list[str], list[str]]:
    """One page of Markdown for a FinQA/TAT-QA context: the text before, Table 1, the text after.
    Returns the text and the table's row labels and column names as written there."""
    header = _unique([str(c) for c in table[0]] if table else [], "column")
    labels = _unique([str(r[0]) if r else "" for r in table[1:]], "row")
    lines = ["<!-- page 1 -->", "", "# Text before the table", ""]
    lines += [f"{' '.join(str(p).split())}\n" for p in before if str(p).strip()]
    width = len(header)
    lines += ["**Table 1: Financial data**", "", "| " + " | ".join(header) + " |", "|" + "---|" * width]
    for label, row in zip(labels, table[1:], strict=True):
        cells = [" ".join(str(c).split()).replace("|", "/") for c in list(row[1:width]) + [""] * (width - len(row))]
        lines.append("| " + " | ".join([label, *cells[: width - 1]]) + " |")
    lines += ["", "# Text after the table", ""]
    lines += [f"{' '.join(str(p).split())}\n" for p in after if str(p).strip()]
    return "\n".join(lines), labels, header


def _facts_for_numbers(numbers: Sequence[str], table: Sequence[Sequence[str]], labels: list[str], header: list[str],
                       paragraphs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    facts, done = [], set()
    for text in numbers:
        value = finqa_number(text)
        if value is None or text.startswith(("const_", "#")) or value in done:
            continue
        cells = [{"page": 1, "table": "Table 1", "row": labels[i], "column": header[j]}
                 for i, row in enumerate(table[1:]) for j in range(1, min(len(row), len(header)))
                 if _cell_number(str(row[j])) == value]
        spots = [{"page": 1, "section": section} for section, p in paragraphs
                 if re.search(rf"(?<![\d.,]){re.escape(text)}(?![\d])", p)]
        if not cells and not spots:
            continue
        facts.append({"at": cells + spots[:1], **({"contains": text} if spots else {})})
        done.add(value)
    return facts


def _record(tid: str, question: str, document: str, answer: dict[str, Any], evidence: list, program: str | None) -> dict:
    record = {"id": tid, "domain": "doc", "prompt": question, "document": document, "answer": answer,
              "evidence": evidence, "tags": ["doc", "anchor"]}
    if program:
        record["program"] = program
    return record


def finqa_records(path: str | Path) -> list[dict[str, Any]]:
    """Doc task records for a FinQA JSON file (a list of examples with ``pre_text``, ``post_text``,
    ``table``, ``id`` and ``qa``: ``question``, ``program``, ``exe_ans``)."""
    out = []
    for ex in json.loads(Path(path).read_text(encoding="utf-8")):
        qa, table = ex["qa"], ex.get("table") or [[""]]
        document, labels, header = context_markdown(ex.get("pre_text", []), table, ex.get("post_text", []))
        exe = qa.get("exe_ans")
        answer = {"text": exe} if isinstance(exe, str) else {"number": repr(float(exe))}
        numbers = [a.strip() for step in re.findall(r"\(([^()]*)\)", qa.get("program", "")) for a in step.split(",")]
        paragraphs = [("Text before the table", " ".join(str(p).split())) for p in ex.get("pre_text", [])] + [
            ("Text after the table", " ".join(str(p).split())) for p in ex.get("post_text", [])]
        facts = _facts_for_numbers([n for n in numbers if not n.startswith("#")], table, labels, header, paragraphs)
        out.append(_record(f"finqa-{ex['id']}", qa["question"], document, answer, facts, qa.get("program")))
    return out


def tatqa_records(path: str | Path) -> list[dict[str, Any]]:
    """Doc task records for a TAT-QA JSON file (contexts with ``table``, ``paragraphs`` and ``questions``)."""
    out = []
    for context in json.loads(Path(path).read_text(encoding="utf-8")):
        table = context["table"]["table"]
        paras = [p["text"] for p in sorted(context.get("paragraphs", []), key=lambda p: p.get("order", 0))]
        document, labels, header = context_markdown(paras, table, [])
        paragraphs = [("Text before the table", " ".join(str(p).split())) for p in paras]
        for qa in context["questions"]:
            scale = qa.get("scale", "")
            if qa["answer_type"] in ("span", "multi-span"):
                spans = [str(s) for s in qa["answer"]]
                answer: dict[str, Any] = {"text": spans[0] if len(spans) == 1 else spans}
                numbers: list[str] = []
            else:
                answer = {"number": str(qa["answer"]), "scale": scale}
                numbers = re.findall(r"\d[\d,]*(?:\.\d+)?", qa.get("derivation", ""))
            facts = _facts_for_numbers(numbers, table, labels, header, paragraphs)
            out.append(_record(f"tatqa-{qa['uid']}", qa["question"], document, answer, facts, None))
    return out


def load_finqa(path: str | Path) -> list[Any]:
    """FinQA JSON as doc ``Task`` s (``finqa_records`` parsed by the doc domain)."""
    from posttrain.envs.doc._env import ENV

    return [ENV.parse_task(r, f"{path}") for r in finqa_records(path)]


def load_tatqa(path: str | Path) -> list[Any]:
    """TAT-QA JSON as doc ``Task`` s (``tatqa_records`` parsed by the doc domain)."""
    from posttrain.envs.doc._env import ENV

    return [ENV.parse_task(r, f"{path}") for r in tatqa_records(path)]
