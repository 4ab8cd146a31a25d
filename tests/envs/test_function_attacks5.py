"""A policy against the function domain's generated tasks through the verifier as a run calls it
(``verify_function``: each reward function in its check worker): the right answer in ``\\boxed{}``
and a wrong one in another kind of box.

Before, ``examples.boxed_match`` counted ``\\boxed``, ``\\fbox`` and ``\\framebox`` only, so a second
answer framed by ``\\fcolorbox`` (a coloured frame) or MathJax's ``\\bbox``, or highlighted by
``\\colorbox``, was no second answer: each passed 140 of 140 generated boxed tasks (seed 1, 300
tasks). Each now fails (both tests failed on the old code); the right answer alone still passes.

Then (a fifth read, below): mathtools' ``\\Aboxed``, ``\\dashbox``, ``\\tcbhighmath``, ``\\style`` /
``\\htmlStyle``, a framed environment and a ruled one-column array or tabular, each beside the right
``\\boxed{}`` (the frame after it): 142 of 142 generated boxed tasks (seed 5) each before, 0 after. Layout
that frames nothing (``\\mbox``, ``\\displaystyle``, an augmented matrix, a determinant, a two-column
table) beside the one box still passes.
"""

from __future__ import annotations

import pytest

from posttrain.envs.function import ENV
from posttrain.envs.function._domain import verify_function

BOXED = [t for t in ENV.generate_tasks(40, seed=1) if "boxed" in str(t.fields["reward"])][:6]


@pytest.mark.parametrize("other", [r"\fcolorbox{red}{white}{%s}", r"\colorbox{yellow}{$%s$}", r"\bbox[2px,border:1px solid]{%s}"])
def test_a_second_answer_in_another_box_fails(other: str) -> None:
    for task in BOXED:
        answer = task.fields["data"]["answer"]
        hedge = f"\\boxed{{{answer}}} or " + other % (int(answer) + 1)
        assert not verify_function(task, hedge).passed, hedge


def test_the_answer_alone_passes() -> None:
    assert all(verify_function(t, f"\\boxed{{{t.fields['data']['answer']}}}").passed for t in BOXED)


# A second answer in a frame ``_ANY_BOX`` did not count: mathtools' \Aboxed, LaTeX's \dashbox, tcolorbox's
# \tcbhighmath, MathJax's \style / KaTeX's \htmlStyle, a framed environment, a one-column ruled array or
# tabular (the old way to box an answer). Each beside the right \boxed{} passed 142 of 142 generated boxed
# tasks (seed 5) before; 0 of 142 after.
FRAMES = {
    "mathtools Aboxed": r"\Aboxed{x &= %s}",
    "dashbox": r"\dashbox{2}(20,10){%s}",
    "tcbhighmath": r"\tcbhighmath{%s}",
    "MathJax style": r"\style{border:1px solid}{%s}",
    "KaTeX htmlStyle": r"\htmlStyle{border:1px solid}{%s}",
    "framed": r"\begin{framed}%s\end{framed}",
    "mdframed": r"\begin{mdframed}%s\end{mdframed}",
    "tcolorbox": r"\begin{tcolorbox}%s\end{tcolorbox}",
    "boxedminipage": r"\begin{boxedminipage}{2cm}%s\end{boxedminipage}",
    "a ruled one-column array": r"$\begin{array}{|c|}\hline %s \\ \hline\end{array}$",
    "a ruled one-column tabular": r"\begin{tabular}{ | c | }\hline %s \\ \hline\end{tabular}",
}


@pytest.mark.parametrize("name", list(FRAMES))
def test_a_second_answer_in_a_frame_fails_as_the_candidates_own(name: str) -> None:
    for task in BOXED:
        answer = task.fields["data"]["answer"]
        for hedge in (f"\\boxed{{{answer}}} or " + FRAMES[name] % (int(answer) + 1),
                      FRAMES[name] % (int(answer) + 1) + f" so \\boxed{{{answer}}}"):
            v = verify_function(task, hedge)
            assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, "wrong_answer"), (hedge, v)


@pytest.mark.parametrize("honest", [
    r"$7\mbox{ apples}$, so \boxed{%s}",
    r"$\displaystyle \sum = %s$ and \textstyle \boxed{%s}",
    r"$\left[\begin{array}{cc|c}1&0&2\\0&1&3\end{array}\right]$ gives \boxed{%s}",
    r"$\left|\begin{array}{cc}1&2\\3&4\end{array}\right|$ aside, \boxed{%s}",
    r"\begin{tabular}{|c|c|}\hline a & b \\ \hline\end{tabular} \boxed{%s}",
])
def test_layout_beside_the_one_box_is_no_second_answer(honest: str) -> None:
    for task in BOXED[:2]:
        answer = task.fields["data"]["answer"]
        assert verify_function(task, honest.replace("%s", answer)).passed, honest
