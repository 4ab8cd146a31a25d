"""The scripted demonstrator (single-turn, and its attempts in repair episodes) and the train/eval split.

The task families (the quickstart's, the feedback-only ``repair`` family) live in their domains
(``Env.task_families``, looked up by name through the registry); ``repair_tasks`` and
``repair_guess`` here only look them up.

The demonstrator is wrong on a known fraction of tasks, in a plausible way its domain defines
(``Env.demonstration_mistake``: a sign error in math, the wrong operator in code). SFT on its
demonstrations learns its mistakes too, so imitation alone has a ceiling near the demonstrator's
accuracy; RL against the verifier can go past it.

Not here: the domains' task schemas and verifiers (``posttrain.envs``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from posttrain.types import Task


@dataclass(frozen=True)
class Demonstrator:
    """A scripted demonstrator that is wrong on a fixed fraction of tasks.

    Whether it errs on a task is a deterministic function of the task id and ``seed``, so the
    same task always gets the same demonstration and its accuracy on any split is measurable.
    """

    error_rate: float = 0.4
    seed: int = 0

    def knows(self, task: Task) -> bool:
        """Whether it can demonstrate ``task`` as one answer: one with a reference whose domain has a
        mistake for it, and not a feedback-only task (``posttrain.envs.is_feedback_only``): only a
        repair episode's feedback carries that answer (``sft.demonstrations: repair``)."""
        from posttrain.envs import is_feedback_only

        return task.reference is not None and not is_feedback_only(task) and _mistake(task) is not None

    def errs_on(self, task: Task) -> bool:
        return random.Random(f"{self.seed}:{task.id}").random() < self.error_rate

    def respond(self, task: Task) -> str:
        if task.reference is None:
            raise ValueError(f"task {task.id} has no reference response")
        if not self.errs_on(task):
            return task.reference
        mistake = _mistake(task)
        if mistake is None:
            raise ValueError(f"the scripted demonstrator has no mistake for task {task.id} ({task.domain})")
        return mistake


def _mistake(task: Task) -> str | None:
    from posttrain.envs import HasDemonstrationMistakes

    env = _env_of(task)
    return env.demonstration_mistake(task) if isinstance(env, HasDemonstrationMistakes) else None


def _env_of(task: Task) -> object | None:
    from posttrain.envs import get_domain, is_registered

    return get_domain(task.domain) if is_registered(task.domain) else None


def split_tasks(tasks: list[Task], *, n_eval: int) -> tuple[list[Task], list[Task]]:
    """First ``n_eval`` tasks are held out; the rest train. Ids are unique, so the splits share no task."""
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError("task ids must be unique before splitting")
    return tasks[n_eval:], tasks[:n_eval]


# --- The feedback-only family (issue 10) lives in the code domain (its task family ``repair``).


def repair_tasks(*, seed: int = 0) -> list[Task]:
    """The ``repair`` task family (the feedback-only family, issue 10), by name from the registry."""
    from posttrain.tasks._sources import task_family

    family = task_family("repair")
    if family is None:
        raise ValueError("no registered domain offers the task family 'repair'")
    return family(seed=seed)


def repair_guess(task: Task) -> str:
    """The scripted demonstrator's first attempt at a repair task: its domain's mistake for it (a
    guess that only the feedback can correct)."""
    guess = _mistake(task)
    if guess is None:
        raise ValueError(f"task {task.id} ({task.domain}) has no scripted first attempt")
    return guess


def repair_attempts(task: Task, demo: Demonstrator) -> list[str]:
    """The scripted demonstrator's attempts in a repair episode: a guess (``repair_guess``), then
    the fix read off the feedback (the reference). On the tasks it errs on (``demo.errs_on``) it
    reads the feedback but special-cases it (its domain's ``demonstration_shortcut``: it passes the
    shown test and fails the hidden ones) and resubmits that until attempts run out; a domain with
    no shortcut resubmits the guess. SFT on its episodes writes the fix on about ``1 - error_rate``
    of tasks: imitation's ceiling, which RL over repair episodes can pass and single-turn RL cannot
    (issue 10). Both kinds of episode copy what the feedback shows, so SFT learns to read it from
    every demonstration.
    """
    guess = repair_guess(task)
    if demo.errs_on(task):
        return [guess] + [_shortcut(task) or guess] * (task.limits.max_attempts - 1)
    return [guess, str(task.reference)]


def _shortcut(task: Task) -> str | None:
    from posttrain.envs import HasDemonstrationShortcuts

    env = _env_of(task)
    return env.demonstration_shortcut(task) if isinstance(env, HasDemonstrationShortcuts) else None


def repair_script_problem(task: Task) -> str | None:
    """Why the scripted demonstrator cannot play ``task`` as a repair episode, or None when it can."""
    if task.reference is None:
        return "it has no reference (the fix the demonstrator reads off the feedback)"
    try:
        repair_attempts(task, Demonstrator(error_rate=1.0))  # the guess and the shortcut, when there is one
    except (ValueError, KeyError, IndexError) as e:
        return str(e) or type(e).__name__
    return None
