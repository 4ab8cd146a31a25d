"""A user's own FinQA / TAT-QA files, end to end: convert them to doc tasks, and score a model's answers
to them with the anchor's own metric (FinQA's execution accuracy, TAT-QA's EM / F1 / scale accuracy).

    python -m posttrain.envs.doc convert finqa dev.json tasks.jsonl     # doc task records, one a line
    posttrain eval --tasks tasks.jsonl --model CKPT --out RUN            # posttrain's pass rate (evidence checked)
    python -m posttrain.envs.doc score finqa dev.json RUN/eval/*.jsonl   # {"finqa_execution_accuracy": ...}

``score`` reads posttrain's records or responses (JSONL lines with ``task_id`` and ``completion`` or
``response``; the first attempt of sample 0 of each task counts, as the anchors score one answer a
question) and maps each answer to the anchor's prediction: FinQA's is the number the answer asserts
(its ``scale`` folded in; an answer that is itself a FinQA program string is executed) or its text
(``yes``/``no``), judged by ``finqa_execution_accuracy``; TAT-QA's is ``[answer, scale]`` as the
answer gives them, judged by ``tatqa_scores``. A completion that does not parse is a missing
prediction (0), as in the anchors' evaluators. The evidence a doc answer cites is not part of either
metric: posttrain's own pass rate (``posttrain eval`` on the converted tasks) is the stricter number,
and both are printed side by side by a user who runs both.

Not here: the metrics themselves (``_anchors.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from posttrain.envs.doc._anchors import (
    finqa_execution_accuracy,
    finqa_is_program,
    finqa_records,
    tatqa_records,
    tatqa_scores,
)
from posttrain.envs.doc._check import SCALES, as_number, fold
from posttrain.strict_json import StrictJSONError, extract_json_text, loads_strict

ANCHORS = ("finqa", "tatqa")


def first_answers(lines: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``{task_id: completion}`` of the first attempt of sample 0 of each task (records or responses)."""
    out: dict[str, str] = {}
    for rec in lines:
        if rec.get("sample_idx", 0) != 0 or rec.get("attempt", 0) != 0:
            continue
        text = rec.get("completion", rec.get("response"))
        if isinstance(rec.get("task_id"), str) and isinstance(text, str):
            out.setdefault(rec["task_id"], text)
    return out


def parsed_answer(completion: str) -> tuple[Any, str] | None:
    """``(answer, scale)`` of a doc response (parsed strictly, as the verifier parses it), or None."""
    try:
        value = loads_strict(extract_json_text(completion), exact=True, max_chars=100_000)
    except StrictJSONError:
        return None
    if not isinstance(value, dict) or "answer" not in value:
        return None
    scale = value.get("scale", "")
    return value["answer"], scale if isinstance(scale, str) else ""


def finqa_prediction(answer: Any, scale: str) -> str | float | None:
    """FinQA's prediction for a doc answer: a program string as it is, text as it is (``yes``), else
    the number it asserts with its scale folded in.

    >>> finqa_prediction(1.639, "percent"), finqa_prediction("subtract(5, 3)", ""), finqa_prediction(True, "")
    (0.01639, 'subtract(5, 3)', None)
    """
    if isinstance(answer, str) and finqa_is_program(answer):
        return answer
    number = as_number(Decimal(repr(answer)) if isinstance(answer, float) and math.isfinite(answer) else answer)
    if number is not None:
        folded = fold(number, scale if scale in SCALES else "")
        return None if folded is None else float(folded)
    return answer.strip().lower() if isinstance(answer, str) else None


def score(anchor: str, examples_path: Path, answers: Mapping[str, str]) -> dict[str, float]:
    """The anchor's metrics over every question of ``examples_path`` (a question never answered scores 0)."""
    data = json.loads(examples_path.read_text(encoding="utf-8"))
    if anchor == "finqa":
        preds: dict[str, str | float] = {}
        for ex in data:
            got = parsed_answer(answers.get(f"finqa-{ex['id']}", ""))
            pred = None if got is None else finqa_prediction(*got)
            if pred is not None:
                preds[ex["id"]] = pred
        return {"finqa_execution_accuracy": finqa_execution_accuracy(preds, data), "questions": float(len(data)),
                "answered": float(len(preds))}
    tat: dict[str, Sequence[Any]] = {}
    for context in data:
        for qa in context["questions"]:
            got = parsed_answer(answers.get(f"tatqa-{qa['uid']}", ""))
            if got is not None:
                answer, scale = got
                tat[qa["uid"]] = [[str(a) for a in answer] if isinstance(answer, list) else
                                  (str(answer) if isinstance(answer, int | Decimal) else answer), scale]
    scores = tatqa_scores(tat, data)
    return {"tatqa_em": scores["em"], "tatqa_f1": scores["f1"], "tatqa_scale_accuracy": scores["scale"],
            "questions": scores["questions"], "answered": float(len(tat))}


def _read_jsonl(paths: Sequence[Path]) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise SystemExit(f"{path}:{i}: not a JSON line ({e.msg})") from None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m posttrain.envs.doc", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="FinQA / TAT-QA JSON -> doc task records (JSONL)")
    c.add_argument("anchor", choices=ANCHORS)
    c.add_argument("examples", type=Path)
    c.add_argument("out", type=Path)
    s = sub.add_parser("score", help="the anchor's metrics of posttrain records / responses on those tasks")
    s.add_argument("anchor", choices=ANCHORS)
    s.add_argument("examples", type=Path)
    s.add_argument("records", type=Path, nargs="+")
    args = p.parse_args(argv)
    if not args.examples.is_file():
        print(f"{args.examples}: no such file", file=sys.stderr)
        return 2
    if args.command == "convert":
        records = (finqa_records if args.anchor == "finqa" else tatqa_records)(args.examples)
        args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        print(f"{len(records)} doc tasks -> {args.out}")
        return 0
    missing = [str(r) for r in args.records if not r.is_file()]
    if missing:
        print(f"{', '.join(missing)}: no such file", file=sys.stderr)
        return 2
    print(json.dumps(score(args.anchor, args.examples, first_answers(_read_jsonl(args.records)))))
    return 0
