"""Property-based attack on the math verifier: random exact values against an exact oracle.

Gold values and boxed answers are random integers (up to 10^40), rationals, tiny and huge
decimals and scientific forms, each written in one of several LaTeX spellings; the oracle is
``fractions.Fraction``. The verifier must pass exactly when the oracle says the values are equal:
every final spelling of the gold value passes (in the number form, the default for a rational
gold), and every spelling, final or with work left in it (an unreduced fraction, ``a + b``, a
mantissa out of [1, 10) times a power of ten), passes where the task's form is an expression; a
spelling with work left in it fails by form (``form:number``) in the number form; every
perturbation (one unit in the last written place, 10^-30, one more on a big integer, a percent
or an equation form) fails. Runs are derandomized, so CI sees the same cases every time.
"""

from __future__ import annotations

from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posttrain.envs import get_domain
from posttrain.types import Task

ENV = get_domain("math")
VERIFY = ENV.make_verifier(None)
SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def task(gold: str, form: str | None = None) -> Task:
    record = {"id": "p", "domain": "math", "prompt": "p", "answer": gold, **({"form": form} if form else {})}
    return ENV.parse_task(record, "property")


def frac_latex(q: Fraction) -> str:
    if q.denominator == 1:
        return str(q.numerator)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


def decimal_latex(q: Fraction) -> str | None:
    """The finite decimal that spells ``q`` exactly, or None if ``q`` has none."""
    den, twos, fives = q.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    if den != 1:
        return None
    places = max(twos, fives)
    scaled = abs(q.numerator) * (10**places // q.denominator)
    digits = str(scaled).rjust(places + 1, "0")
    text = digits if places == 0 else f"{digits[:-places]}.{digits[-places:]}"
    return ("-" if q < 0 else "") + text


integers = st.one_of(st.integers(-1000, 1000), st.integers(-(10**40), 10**40))
rationals = st.builds(Fraction, st.integers(-(10**12), 10**12), st.integers(1, 10**12))
decimals = st.builds(lambda m, e: Fraction(m) * Fraction(10) ** e, st.integers(-(10**15), 10**15), st.integers(-30, 30))
values = st.one_of(integers.map(Fraction), rationals, decimals)


@st.composite
def final_spellings(draw: st.DrawFn, q: Fraction) -> str:
    """One LaTeX spelling of exactly ``q`` in the number form: the reduced fraction, the decimal
    (with a trailing zero or not), or scientific notation with a mantissa in [1, 10)."""
    forms = [frac_latex(q)]
    dec = decimal_latex(q)
    if dec is not None:
        forms += [dec, dec + "0" if "." in dec else dec + ".0"]
    if q != 0:
        e = len(str(abs(q.numerator))) - len(str(q.denominator))
        e = e - 1 if abs(q) / Fraction(10) ** e < 1 else e
        mantissa = decimal_latex(abs(q) / Fraction(10) ** e)
        if mantissa is not None:
            forms.append(f"{'-' if q < 0 else ''}{mantissa} \\times 10^{{{e}}}")
    return draw(st.sampled_from(forms))


@st.composite
def worked_spellings(draw: st.DrawFn, q: Fraction) -> str:
    """One LaTeX spelling of exactly ``q`` with work left in it: an unreduced fraction, a sum or
    a difference, or a mantissa out of [1, 10) times a power of ten."""
    k = draw(st.integers(2, 9))
    forms = [f"\\frac{{{q.numerator * k}}}{{{q.denominator * k}}}"]
    a = draw(st.integers(-50, 50))
    rest = q - a
    forms.append(f"{a} + {frac_latex(rest)}" if rest >= 0 else f"{a} - {frac_latex(-rest)}")
    e = draw(st.integers(-30, 30))
    mantissa = decimal_latex(q / Fraction(10) ** e)
    if mantissa is not None and not 1 <= abs(q / Fraction(10) ** e) < 10:
        forms.append(f"{mantissa} \\times 10^{{{e}}}")
    return draw(st.sampled_from(forms))


@st.composite
def spellings(draw: st.DrawFn, q: Fraction) -> str:
    """One LaTeX spelling of exactly ``q``, final or with work left in it."""
    return draw(final_spellings(q) if draw(st.booleans()) else worked_spellings(q))


@SETTINGS
@given(data=st.data(), gold=values)
def test_every_final_spelling_of_the_gold_value_passes(data: st.DataObject, gold: Fraction) -> None:
    answer = data.draw(final_spellings(gold))
    gold_text = data.draw(spellings(gold))
    v = VERIFY(task(gold_text), f"\\boxed{{{answer}}}")
    assert v.passed, (gold_text, answer, v)


@SETTINGS
@given(data=st.data(), gold=values)
def test_every_spelling_passes_where_the_form_is_an_expression(data: st.DataObject, gold: Fraction) -> None:
    answer = data.draw(spellings(gold))
    gold_text = data.draw(spellings(gold))
    v = VERIFY(task(gold_text, "expression"), f"\\boxed{{{answer}}}")
    assert v.passed, (gold_text, answer, v)


@SETTINGS
@given(data=st.data(), gold=values)
def test_work_left_in_a_spelling_fails_by_form(data: st.DataObject, gold: Fraction) -> None:
    answer = data.draw(worked_spellings(gold))
    v = VERIFY(task(frac_latex(gold)), f"\\boxed{{{answer}}}")
    assert (v.outcome, v.error_class) == ("fail", "form:number"), (frac_latex(gold), answer, v)


@st.composite
def perturbations(draw: st.DrawFn, q: Fraction) -> Fraction:
    dec = decimal_latex(q)
    last_place = Fraction(1, 10 ** (len(dec.split(".")[1]) if dec and "." in dec else 0))
    delta = draw(st.sampled_from([last_place, Fraction(1, 10**30), Fraction(1, 2**60), Fraction(1),
                                  Fraction(1, q.denominator * 1000)]))
    return q + delta * draw(st.sampled_from([1, -1]))


@SETTINGS
@given(data=st.data(), gold=values)
def test_a_perturbed_value_fails_however_small_the_difference(data: st.DataObject, gold: Fraction) -> None:
    wrong = data.draw(perturbations(gold))
    assert wrong != gold
    dec = decimal_latex(wrong)
    answer = dec if dec is not None and data.draw(st.booleans()) else data.draw(final_spellings(wrong))
    v = VERIFY(task(frac_latex(gold)), f"\\boxed{{{answer}}}")
    assert (v.outcome, v.error_class) == ("fail", "wrong_answer"), (frac_latex(gold), answer, v)
    worked = data.draw(spellings(wrong))
    v = VERIFY(task(frac_latex(gold), "expression"), f"\\boxed{{{worked}}}")
    assert (v.outcome, v.error_class) == ("fail", "wrong_answer"), (frac_latex(gold), worked, v)


@SETTINGS
@given(data=st.data(), gold=values, other=values)
def test_verdict_agrees_with_the_oracle_on_random_pairs(data: st.DataObject, gold: Fraction, other: Fraction) -> None:
    answer = other if data.draw(st.booleans()) else gold
    v = VERIFY(task(data.draw(spellings(gold))), f"\\boxed{{{data.draw(final_spellings(answer))}}}")
    assert v.passed is (answer == gold), (gold, answer, v)
    v = VERIFY(task(data.draw(spellings(gold)), "expression"), f"\\boxed{{{data.draw(spellings(answer))}}}")
    assert v.passed is (answer == gold), (gold, answer, v)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), value=st.one_of(integers.map(Fraction), decimals))
def test_percent_and_equation_forms_only_match_their_own_form(data: st.DataObject, value: Fraction) -> None:
    text = data.draw(final_spellings(value))
    assert VERIFY(task(f"{text}\\%"), f"\\boxed{{{text}\\%}}").passed
    assert VERIFY(task(f"x = {text}"), f"\\boxed{{x={text}}}").passed
    assert VERIFY(task(text), f"\\boxed{{{text}\\%}}").error_class == "form:percent"
    assert VERIFY(task(f"{text}\\%"), f"\\boxed{{{text}}}").error_class == "form:percent"
    assert VERIFY(task(text), f"\\boxed{{x = {text}}}").error_class == "form:relation"
    assert VERIFY(task(text), f"\\boxed{{{text} = {text}}}").error_class == "form:relation"


surds = st.tuples(st.integers(1, 30), st.sampled_from([2, 3, 5, 6, 7, 10, 11]))


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(surd=surds, digits=st.integers(3, 15))
def test_surds_are_exact_and_decimals_never_match_them(surd: tuple[int, int], digits: int) -> None:
    a, b = surd
    t = task(f"{a}\\sqrt{{{b}}}")
    unsimplified = f"\\boxed{{\\sqrt{{{a * a * b}}}}}"  # work left in it unless a = 1
    assert VERIFY(task(f"{a}\\sqrt{{{b}}}", "expression"), unsimplified).passed
    assert VERIFY(t, unsimplified).error_class == (None if a == 1 else "form:closed")
    approx = f"{a * b**0.5:.{digits}f}"
    assert VERIFY(t, f"\\boxed{{{approx}}}").error_class == "wrong_answer"
