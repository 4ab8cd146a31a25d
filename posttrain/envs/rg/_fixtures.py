"""The exploit fixtures every rg domain ships: what a policy tries before it solves anything.

Built from the generator's own tasks (default configuration, seed 0), so each generator is played
on its own answer format. Each must be a ``fail`` (never a pass, never an ``infra_error``):

- an empty answer block; the question echoed back, in an answer block and as the whole response
  (the rendered prompt, whose instruction names the tags);
- every option at once: the distinct answers of 8 tasks, the right one among them, joined by
  ", ", by new lines (right one last), by spaces, and one answer block each;
- a huge number (a thousand 9s), 1e308, -1e308, inf, nan;
- another task's answer alone (a constant answer that ignores the question), the reference
  followed by a wrong option ("A or B") and a wrong option followed by the reference;
- code in the answer (``__import__('os').getpid()``, and a lambda): a scorer that evaluates it
  must refuse it unrun (tests/envs/test_rg.py checks that nothing ran);
- for a Yes/No or True/False answer, every truth value at once;
- propositional_logic: the premises joined by ∧, each premise restated and weakened by ``∨`` a
  variable, a tautology (``_logic``; the generator's scorer passed the first two).

Where the generator's scorer passed one of these, ``_hardened.py`` holds the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posttrain.envs.rg._check import CLOSE, OPEN
from posttrain.envs.rg._hardened import HARDENED, Rule
from posttrain.types import Task

if TYPE_CHECKING:
    from posttrain.envs.rg._domain import RgDomain

TRUTH = {"yes", "no", "true", "false"}


def exploit_fixtures(domain: RgDomain) -> list[tuple[str, Task, str]]:
    """The fixtures on the first of 8 tasks (default configuration, seed 0), the others' answers as
    the wrong options."""
    tasks = domain.generate_tasks(8, seed=0)
    return [(f"rg {name}", tasks[0], response) for name, response in attacks(domain, tasks[0], tasks[1:])]


def attacks(domain: RgDomain, task: Task, others: list[Task]) -> list[tuple[str, str]]:
    """``(name, response)`` of every attack above on ``task``, with ``others``' answers as the wrong
    options (tests/envs/test_rg.py plays them on many tasks of each generator). An other task with the
    same question is no other task (knight_swap made one board twice, and either's answer solves it)."""
    ref = _answer(task)
    options = list(dict.fromkeys([ref] + [_answer(t) for t in others if t.prompt != task.prompt]))
    out = [
        ("an empty answer block", f"{OPEN}{CLOSE}"),
        ("the question echoed back in an answer block", f"{OPEN}{task.prompt}{CLOSE}"),
        ("the rendered prompt echoed back", domain.render_prompt(task)),
        ("a huge number", f"{OPEN}{'9' * 1000}{CLOSE}"),
        ("1e308", f"{OPEN}1e308{CLOSE}"),
        ("-1e308", f"{OPEN}-1e308{CLOSE}"),
        ("inf", f"{OPEN}inf{CLOSE}"),
        ("nan", f"{OPEN}nan{CLOSE}"),
    ]
    if len(options) > 1:
        wrong = options[1]
        out += [
            ("every option at once, comma-separated", f"{OPEN}{', '.join(options)}{CLOSE}"),
            ("every option at once, one per line, the right one last", f"{OPEN}{chr(10).join(options[::-1])}{CLOSE}"),
            ("every option at once, space-separated", f"{OPEN}{' '.join(options)}{CLOSE}"),
            ("one answer block per option", "".join(f"{OPEN}{o}{CLOSE}" for o in options)),
            ("the reference followed by a wrong option", f"{OPEN}{ref} or {wrong}{CLOSE}"),
            ("a wrong option followed by the reference", f"{OPEN}{wrong} {ref}{CLOSE}"),
        ]
        if not HARDENED.get(domain.generator, Rule()).open_answers and wrong.strip() != ref.strip():
            out.append(("another task's answer", f"{OPEN}{wrong}{CLOSE}"))
    out += [("code in the answer", f"{OPEN}__import__('os').getpid(){CLOSE}"),
            ("a lambda in the answer", f"{OPEN}(lambda: 24)(){CLOSE}")]
    if ref.strip().lower() in TRUTH:
        out.append(("every truth value at once", f"{OPEN}Yes No True False{CLOSE}"))
    if domain.generator == "propositional_logic":
        out += _logic(task)
    return out


def _logic(task: Task) -> list[tuple[str, str]]:
    """Conclusions made from the premises without inferring anything."""
    premises = [str(p) for p in task.fields["rg_metadata"]["premises"]]
    var = sorted(set(task.fields["rg_metadata"]["variables"]))[0]
    out = [("the premises joined by ∧", f"{OPEN}({' ∧ '.join(premises)}){CLOSE}"),
           ("a tautology", f"{OPEN}({var} ∨ ¬{var}){CLOSE}")]
    for i, p in enumerate(premises):
        out += [(f"premise {i + 1} restated", f"{OPEN}{p}{CLOSE}"),
                (f"premise {i + 1} weakened", f"{OPEN}({p} ∨ {var}){CLOSE}")]
    return out


def _answer(task: Task) -> str:
    """The answer a task's reference response gives (inside its answer block)."""
    text = str(task.reference)
    return text[len(OPEN):-len(CLOSE)]
