"""Reward functions that ship with posttrain: usable as they are, and the models for your own.

Name one in a recipe (``reward: posttrain.envs.function.examples:exact_match``) or in a task
record (``"reward": "..."``). Each takes the prompt, the completion and the task's ``data`` as
keyword arguments, and returns a float in [0, 1] (the default range); TRL's batched form
(``format_reward``) works too.

None of them looks for the answer anywhere in the text (``answer in completion`` rewards a
completion that lists every number): each reads exactly one answer from a fixed place. The answer
functions read it after the completion's reasoning (``strict_json.after_reasoning``), as the math,
json and tool domains do: a draft in ``<think>`` is not the answer, and read whole, a reasoning
model's right answer failed each of them (tests/envs/test_toolfam_honest.py); ``format_reward``
judges the whole completion, its reasoning included.

>>> exact_match("2+2?", " 4\\n", answer="4")
1.0
>>> boxed_match("2+2?", "so \\\\boxed{4} or \\\\boxed{5}", answer="4")
0.0
>>> format_reward(["q"], ["<think>a</think><answer>b</answer>"])
[1.0]
>>> tagged_answer("q", "<answer>Paris</answer>", answer="Paris")
1.0
>>> exact_match("2+2?", "<think>2 and 2</think> 4", answer="4")
1.0
"""

from __future__ import annotations

import re
from typing import Any

from posttrain.strict_json import after_reasoning

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_ANY_BOX = re.compile(r"\\(?:A?boxed|fbox|framebox|fcolorbox|colorbox|bbox|enclose|[oO]valbox|doublebox|shadowbox|tcbox"
                      r"|tcbhighmath|dashbox|htmlStyle|style)"
                      r"|\\begin\s*\{\s*(?:framed|mdframed|tcolorbox|boxedminipage|shaded)\*?\s*\}"
                      r"|\\begin\s*\{\s*(?:array|tabular)\s*\}\s*\{\s*\|\s*[lcr]\s*\|\s*\}")
"""Every box a reader takes for an answer: the math domain reads ``\\fbox`` as it reads ``\\boxed``;
``\\fcolorbox`` (a framed box in colour), ``\\colorbox`` (a highlight) and MathJax's ``\\bbox`` mark
one as plainly: ``\\boxed{7} or \\fcolorbox{red}{white}{8}`` passed 140 of 140 generated boxed tasks.
So do MathJax's ``\\enclose{box}{8}`` (any ``\\enclose`` notation), fancybox's ``\\ovalbox``,
``\\Ovalbox``, ``\\doublebox``, ``\\shadowbox`` and tcolorbox's ``\\tcbox``: each beside ``\\boxed{7}``
passed 142 of 142 generated boxed tasks (seed 5; tests/envs/test_toolfam_attacks1.py). So did mathtools'
``\\Aboxed``, LaTeX's ``\\dashbox``, tcolorbox's ``\\tcbhighmath``, MathJax's ``\\style``/KaTeX's
``\\htmlStyle`` (a border or a colour), a framed environment (``framed``, ``mdframed``, ``tcolorbox``,
``boxedminipage``, ``shaded``) and a one-column array or tabular ruled on both sides (``{|c|}``, the
old way to box an answer): 142 of 142 each (tests/envs/test_function_attacks5.py). An array with a
rule inside (an augmented matrix, ``{cc|c}``) is no box."""
_ANY_ANSWER_TAG = re.compile(r"<answer", re.IGNORECASE)
"""Every answer tag a reader sees: tag names are case-insensitive (HTML), so ``<ANSWER>`` is one too."""
_ANSWER = re.compile(r"<answer>([^<]*)</answer>")
_ANY_ANSWER = re.compile(r"<answer\b[^>]*>(.*?)</answer\s*>", re.IGNORECASE | re.DOTALL)
"""An answer tag's content as a reader sees it (any case, attributes, markup inside)."""
_THINK_ANSWER = re.compile(r"<think>[^<]*</think>\s*<answer>[^<]*</answer>")


def exact_match(prompt: str, completion: str, answer: str, **data: Any) -> float:
    """1.0 when the completion's answer (after its reasoning), stripped, is exactly ``answer``
    (stripped); else 0.0."""
    return 1.0 if after_reasoning(completion).strip() == str(answer).strip() else 0.0


def boxed_match(prompt: str, completion: str, answer: str, **data: Any) -> float:
    """1.0 when the completion has exactly one box and it is ``\\boxed{answer}``. Every box counts,
    read or not: ``\\boxed{7} or \\boxed{\\text{8}}`` (a box with braces inside, or ``\\boxed 8``)
    gives two answers and passed on the one the pattern reads; so did ``\\boxed{7} or \\fbox{8}``
    (``\\fbox``, ``\\framebox``, ``\\fcolorbox``, ``\\colorbox`` and ``\\bbox`` are boxes too: the math
    domain reads ``\\fbox``; so are a framed environment and the rest of ``_ANY_BOX``). A lone
    ``\\fbox{7}`` is not ``\\boxed{7}`` and scores 0. Boxes drafted in the reasoning are not counted.
    An answer tag beside the box is an answer too and must agree: it holds the answer or the box
    (``<answer>\\boxed{7}</answer>``); ``\\boxed{7} or <answer>8</answer>`` passed every generated boxed
    task (tests/envs/test_function_attacks6.py)."""
    completion = after_reasoning(completion)
    boxes = _BOXED.findall(completion)
    one = len(_ANY_BOX.findall(completion)) == 1 and len(boxes) == 1
    return 1.0 if one and boxes[0].strip() == str(answer).strip() and _tags_agree(completion, answer) else 0.0


def _tags_agree(completion: str, answer: str) -> bool:
    """Whether every answer tag of ``completion`` is closed and holds ``answer`` or a box (``boxed_match``)."""
    tagged = _ANY_ANSWER.findall(completion)
    return len(tagged) == len(_ANY_ANSWER_TAG.findall(completion)) and all(
        t.strip() == str(answer).strip() or _ANY_BOX.search(t) for t in tagged)


def tagged_answer(prompt: str, completion: str, answer: str, **data: Any) -> float:
    """1.0 when the completion has exactly one ``<answer`` tag and it is ``<answer>answer</answer>``
    (a second answer the pattern does not read, ``<answer><b>8</b></answer>``, still counts; so does
    ``<ANSWER>8</ANSWER>``: tags are counted in any case, read in lower case only), after the reasoning.
    A box beside the tag is an answer too and must agree: every box is a ``\\boxed{answer}``;
    ``<answer>7</answer> or \\boxed{8}`` (or ``\\fbox{8}``) passed (tests/envs/test_function_attacks6.py)."""
    completion = after_reasoning(completion)
    found = _ANSWER.findall(completion)
    one = len(_ANY_ANSWER_TAG.findall(completion)) == 1 and len(found) == 1
    boxes = _BOXED.findall(completion)
    agree = len(_ANY_BOX.findall(completion)) == len(boxes) and all(b.strip() == str(answer).strip() for b in boxes)
    return 1.0 if one and agree and found[0].strip() == str(answer).strip() else 0.0


def format_reward(prompts: list[str], completions: list[str], **data: Any) -> list[float]:
    """TRL's format reward, in TRL's batched form: 1.0 for ``<think>...</think><answer>...</answer>``
    (the whole completion, whitespace around it allowed), else 0.0."""
    return [1.0 if _THINK_ANSWER.fullmatch(c.strip()) else 0.0 for c in completions]
