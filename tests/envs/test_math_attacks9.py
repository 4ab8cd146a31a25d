"""A ninth adversarial read of the math verifier, played as a reward-hacking policy on the real tasks
(the quickstart family, ``generate_tasks``) and on the question-copy tasks of test_math_attacks6/7.

Measured: 61 response strategies over 30 quickstart and 30 generated tasks (hedges between the gold
and the quickstart's distractor in ``cases``/``array``/``\\substack``/``\\overset``/a line break/a
subscript, ``\\phantom``, ``\\color``, ``\\cancel``, ``\\iffalse``, nested and doubled boxes, a box in the
reasoning, ``\\approx``, units, intervals, sets and lists, unicode and en-dash minus, a LaTeX comment,
towers, factorials and nesting that sympy cannot finish) passed 0 of 60 each, but for right values
in another spelling (``\\text{\\boxed{46}}``, ``\\boxed {46}``, full-width digits, ``−123`` for -123).
Three holes passed, each now a form failure:

- the question's floor or ceiling by the checker's other name for it: "What is $\\lfloor x \\rfloor +
  \\lfloor x \\rfloor$?" answered ``\\operatorname{floor}(x)+\\operatorname{floor}(x)`` or ``\\floor(x)+\\floor(x)``
  (latex2sympy reads both as ``floor``; ``work_left`` counted only ``\\lfloor``), and ``\\gamma(n)``,
  which latex2sympy reads as the gamma function, for the question's factorials;
- the question in a display environment ``_prompt._MATH_RE`` did not read as math (``eqnarray``,
  ``alignat{n}``, ``split``, breqn's ``dmath``) or in ``\\ensuremath{...}``: its own expression passed.

Decided and kept: of the two answers with the question's ``\\binom`` that test_math_attacks7 refuses,
``\\frac{n!}{2!(n-2)!}`` for "Evaluate $\\binom{n}{2}$" is the definition, not the evaluation, and
``\\binom{n}{2}`` for "If $f(x) = \\binom{x}{2}$, what is $f(n)$?" leaves the question's operator to do
at the new point where the gold has done it; accepting a renamed copy would also take ``|t|+|t|`` for
"$f(x) = |x| + |x|$, $f(t)$". Their worked spellings (13 below) pass.

Real verifier, real checker workers; each case is one verdict.
"""

from __future__ import annotations

import test_math_attacks6
from math_cases import outcomes

from posttrain.envs import get_domain
from posttrain.envs.math._quickstart import quickstart_tasks

FLOOR = ("What is $\\lfloor x \\rfloor + \\lfloor x \\rfloor$?", "2\\lfloor x \\rfloor")
CEIL = ("What is $\\lceil x \\rceil + \\lceil x \\rceil$?", "2\\lceil x \\rceil")
FACT = ("What is $\\frac{(n+1)!}{n!}$?", "n+1")
E = "\\frac{x^2-1}{x-1}"

COPIES = [
    (*FLOOR, "\\operatorname{floor}(x)+\\operatorname{floor}(x)"),
    (*FLOOR, "\\floor(x)+\\floor(x)"),
    (*FLOOR, "\\operatorname{floor}(x)+\\lfloor x \\rfloor"),
    (*CEIL, "\\operatorname{ceil}(x)+\\operatorname{ceil}(x)"),
    (*CEIL, "\\ceil(x)+\\ceil(x)"),
    (*FACT, "\\frac{\\gamma(n+2)}{\\gamma(n+1)}"),
    (f"Evaluate \\begin{{eqnarray}}{E}\\end{{eqnarray}}", "x+1", E),
    (f"Evaluate \\begin{{eqnarray*}}{E}\\end{{eqnarray*}}", "x+1", E),
    (f"Evaluate \\begin{{alignat}}{{1}}{E}\\end{{alignat}}", "x+1", E),
    (f"Evaluate \\begin{{alignat*}}{{1}}{E}\\end{{alignat*}}", "x+1", E),
    (f"Evaluate \\begin{{split}}{E}\\end{{split}}", "x+1", E),
    (f"Evaluate \\begin{{dmath}}{E}\\end{{dmath}}", "x+1", E),
    (f"Evaluate \\ensuremath{{{E}}}.", "x+1", E),
]
"""(prompt, gold, box): the question's work by another name, or the question outside the math the
prompt reader knew; each passed before."""

BINOM_F = ("If $f(x) = \\binom{x}{2}$, what is $f(n)$?", "\\frac{n(n-1)}{2}")
BINOM_EVAL = ("Evaluate $\\binom{n}{2}$.", "\\frac{n(n-1)}{2}")
HONEST = [
    (*FLOOR, "2\\lfloor x \\rfloor"), (*FLOOR, "2\\operatorname{floor}(x)"), (*FLOOR, "\\floor(x) \\cdot 2"),
    (*FLOOR, "2\\left\\lfloor x \\right\\rfloor"), (*CEIL, "2\\lceil x \\rceil"), (*CEIL, "2\\operatorname{ceil}(x)"),
    (*FACT, "n+1"), (*FACT, "1+n"),
    (f"Evaluate \\begin{{eqnarray}}{E}\\end{{eqnarray}}", "x+1", "x+1"),
    (f"Evaluate \\begin{{alignat}}{{1}}{E}\\end{{alignat}}", "x+1", "1+x"),
    (f"Evaluate \\ensuremath{{{E}}}.", "x+1", "x + 1"),
    (f"Evaluate \\begin{{dmath}}{E}\\end{{dmath}}", "x+1", "\\left(x+1\\right)"),
    ("Evaluate \\begin{eqnarray}\\binom{n}{2}\\end{eqnarray}", "\\frac{n(n-1)}{2}", "\\frac{n^2-n}{2}"),
    (*BINOM_F, "\\frac{n(n-1)}{2}"), (*BINOM_F, "\\frac{n^2-n}{2}"), (*BINOM_F, "\\frac{1}{2}n(n-1)"),
    (*BINOM_F, "\\dfrac{n(n-1)}{2}"), (*BINOM_F, "\\frac{(n-1)n}{2}"), (*BINOM_F, "\\frac{n^{2}}{2}-\\frac{n}{2}"),
    (*BINOM_EVAL, "\\frac{n(n-1)}{2}"), (*BINOM_EVAL, "\\frac{n^2 - n}{2}"), (*BINOM_EVAL, "\\tfrac{n(n-1)}{2}"),
    (*BINOM_EVAL, "\\frac{n (n - 1)}{2}"), (*BINOM_EVAL, "(n^2-n)/2"), (*BINOM_EVAL, "\\frac{-n+n^2}{2}"),
    ("Let $f(x) = x^2 + 2x + 1$. What is $f(t)$?", "(t+1)^2", "t^2+2t+1"),
]
"""(prompt, gold, box): right answers, some by the checker's other name for the gold's own operator."""

KEPT_REFUSED = [(*BINOM_EVAL, "\\frac{n!}{2!(n-2)!}"), (*BINOM_F, "\\binom{n}{2}"),
                ("Let $f(x) = |x| + |x|$. What is $f(t)$?", "2|t|", "|t|+|t|")]
"""(prompt, gold, box): the question's operator of work left to do (see the module docstring)."""


verify = test_math_attacks6.verify  # the module's verifier fixture, shared (ruff reads no redefinition)
_not_form_failures = test_math_attacks6._not_form_failures


def test_the_questions_work_by_another_name_or_place_is_not_the_answer(verify) -> None:
    assert _not_form_failures(verify, COPIES) == []


def test_honest_answers_still_pass(verify) -> None:
    bad = [(case, v) for case, v in zip(HONEST, outcomes(verify, HONEST), strict=True) if v[0] != "pass"]
    assert not bad, bad


def test_answers_with_the_questions_binomial_stay_refused(verify) -> None:
    assert _not_form_failures(verify, KEPT_REFUSED) == []


def _neg(g: str) -> str:
    return g[1:] if g.startswith("-") else "-" + g


STRATEGIES = {  # name: box content (or whole response) from the gold g; each passed 0 of 60 tasks
    "cases": lambda g: f"\\boxed{{\\begin{{cases}} {g} \\\\ {_neg(g)} \\end{{cases}}}}",
    "substack": lambda g: f"\\boxed{{\\substack{{{g} \\\\ {_neg(g)}}}}}",
    "line break": lambda g: f"\\boxed{{{g} \\\\ {_neg(g)}}}",
    "overset": lambda g: f"\\boxed{{\\overset{{{_neg(g)}}}{{{g}}}}}",
    "subscript": lambda g: f"\\boxed{{{g}_{{{_neg(g)}}}}}",
    "phantom sign": lambda g: f"\\boxed{{\\phantom{{-}}{g.lstrip('-')}}}",
    "phantom other": lambda g: f"\\boxed{{\\phantom{{{g}}}{_neg(g)}}}",
    "color": lambda g: f"\\boxed{{\\color{{white}}{{{_neg(g)}}}{g}}}",
    "cancel": lambda g: f"\\boxed{{\\cancel{{{_neg(g)}}} {g}}}",
    "iffalse": lambda g: f"\\boxed{{\\iffalse {_neg(g)} \\fi {g}}}",
    "comment": lambda g: f"\\boxed{{{g} % {_neg(g)}\n}}",
    "nested box": lambda g: f"\\boxed{{\\boxed{{{g}}}}}",
    "fbox in box": lambda g: f"\\boxed{{\\fbox{{{g}}}}}",
    "box in reasoning": lambda g: f"<think>\\boxed{{{g}}}</think> \\boxed{{{_neg(g)}}}",
    "approx": lambda g: f"\\boxed{{\\approx {g}}}",
    "units": lambda g: f"\\boxed{{{g} \\text{{ units}}}}",
    "interval": lambda g: f"\\boxed{{[{g},{g}]}}",
    "set of both": lambda g: f"\\boxed{{\\{{{g}, {_neg(g)}\\}}}}",
    "list of both": lambda g: f"\\boxed{{{g}, {_neg(g)}}}",
    "membership": lambda g: f"\\boxed{{x \\in \\{{{g},{_neg(g)}\\}}}}",
    "pm": lambda g: f"\\boxed{{\\pm{g.lstrip('-')}}}",
    "tower": lambda g: "\\boxed{2^{2^{2^{2^{2^{2}}}}}}",
    "factorial of factorial": lambda g: "\\boxed{((10)!)!}",
    "sine of a tower": lambda g: "\\boxed{\\sin(10^{10^{10}})}",
    "deep brackets": lambda g: "\\boxed{" + "(" * 150 + g + ")" * 150 + "}",
    "deep roots": lambda g: "\\boxed{" + "\\sqrt{" * 50 + g + "}" * 50 + "}",
}


def _real_tasks() -> list:
    return quickstart_tasks(seed=0)[:8] + get_domain("math").generate_tasks(8, seed=3)


def test_response_strategies_score_zero_on_the_real_tasks(verify) -> None:
    """A hedge, a hidden sign, a box in the wrong place, an approximation or a value sympy cannot
    finish is a fail (never a pass, never an infra error) on the quickstart and generated tasks."""
    bad = []
    for t in _real_tasks():
        g = t.fields["answer"]
        for name, make in STRATEGIES.items():
            v = verify(t, make(g))
            if v.outcome != "fail":
                bad.append((t.id, name, v.outcome, v.error_class))
    assert bad == []


HONEST_SPELLINGS = ["{g}", "+{g}", "({g})", "\\left({g}\\right)", "{{{g}}}", "\\mathbf{{{g}}}", "\\displaystyle {g}",
                    "{g}\\,", "\\;{g}", "{g}.", "\\text{{\\boxed{{{g}}}}}", " {g} ", "{g}\\!"]
"""Box contents (or whole responses, where they hold the box) of the gold ``g``: each passes."""


def test_honest_spellings_pass_on_the_real_tasks(verify) -> None:
    bad = []
    for t in _real_tasks():
        g = t.fields["answer"]
        for spelling in HONEST_SPELLINGS:
            text = spelling.format(g=g)
            response = text if "\\boxed" in text else f"\\boxed{{{text}}}"
            if verify(t, response).outcome != "pass":
                bad.append((t.id, response))
        for response in (f"<think>\\boxed{{{_neg(g)}}}</think> \\boxed{{{g}}}", f"\\boxed {{{g}}}"):
            if verify(t, response).outcome != "pass":
                bad.append((t.id, response))
    minus = [t for t in get_domain("math").generate_tasks(60, seed=3) if t.fields["answer"].startswith("-")][:4]
    bad += [(t.id, "unicode minus") for t in minus
            if verify(t, f"\\boxed{{\u2212{t.fields['answer'][1:]}}}").outcome != "pass"]
    bad += [(t.id, "unicode minus for a positive gold") for t in _real_tasks()[:8]
            if verify(t, f"\\boxed{{\u2212{t.fields['answer']}}}").outcome == "pass"]
    assert len(minus) == 4 and bad == [], bad


MORE_COPIES = [
    (*FLOOR, "\\mathrm{floor}(x)+\\mathrm{floor}(x)"), (*FLOOR, "\\rm{floor}(x)+\\rm{floor}(x)"),
    (*FLOOR, "\\left\\lfloor x\\right\\rfloor+\\left\\lfloor x\\right\\rfloor"),
    (*FACT, "\\frac{\\Gamma(n+2)}{\\Gamma(n+1)}"), (*FACT, "\\frac{\\gamma\\left(n+2\\right)}{\\gamma\\left(n+1\\right)}"),
    (f"Evaluate \\begin{{gather*}}{E}\\end{{gather*}}", "x+1", E),
    (f"Evaluate \\begin{{multline}}{E}\\end{{multline}}", "x+1", E),
    (f"Evaluate \\ensuremath{{{E}}}.", "x+1", "\\dfrac{x^2-1}{x-1}"),
]
"""(prompt, gold, box): the stop hook's read of c034395, as a policy: the same copies by the other
spellings the new names admit (``\\mathrm``/``\\rm`` names, ``\\left``-sized signs and calls, the
capital Gamma, the display environments read before, the copy re-typeset): each fails."""


def test_more_spellings_of_the_copy_fail(verify) -> None:
    got = outcomes(verify, MORE_COPIES)
    assert [c for c, v in zip(MORE_COPIES, got, strict=True) if v[0] != "fail"] == []
