"""The quickstart's task families: references pass the real verifiers, no-ops and the
demonstrator's mistakes fail, splits are disjoint, and the sampler resumes exactly."""

import pytest

from posttrain.envs import get_domain, task_to_record
from posttrain.sandbox import open_pool
from posttrain.tasks import TaskSampler
from posttrain.tasks._sources import task_family
from posttrain.tasks.generators import Demonstrator, split_tasks

math_tasks, code_tasks = task_family("quickstart-math"), task_family("quickstart-code")


@pytest.fixture(scope="module")
def pool():
    with open_pool(size=2) as p:
        yield p


def _sample(tasks, k=12):
    return tasks[:k]


@pytest.mark.parametrize("family", [math_tasks, code_tasks])
def test_references_pass_noop_and_demonstrator_mistakes_fail(pool, family):
    tasks = _sample(family(seed=1))
    env = get_domain(tasks[0].domain)
    verify = env.make_verifier(pool)
    demo = Demonstrator(error_rate=0.5, seed=0)
    for t in tasks:
        # the generated task is a valid record of its domain's schema
        assert env.parse_task(task_to_record(t), "generated").id == t.id
        assert verify(t, t.reference).outcome == "pass", t.id
        assert verify(t, env.noop_response(t)).outcome == "fail", t.id
        expected = "fail" if demo.errs_on(t) else "pass"
        assert verify(t, demo.respond(t)).outcome == expected, t.id


def test_demonstrator_error_rate_is_what_it_says():
    tasks = math_tasks(seed=0) + code_tasks(seed=0)
    demo = Demonstrator(error_rate=0.4, seed=0)
    rate = sum(demo.errs_on(t) for t in tasks) / len(tasks)
    assert 0.37 < rate < 0.43
    assert demo.respond(tasks[0]) == demo.respond(tasks[0])  # deterministic per task


def test_split_shares_no_task_and_ids_are_unique():
    tasks = code_tasks(seed=0)
    assert len({t.id for t in tasks}) == len(tasks)
    train, held = split_tasks(tasks[:300], n_eval=50)
    assert len(held) == 50 and len(train) == 250
    assert not {t.id for t in train} & {t.id for t in held}
    assert not {t.prompt for t in train} & {t.prompt for t in held}


def test_sampler_resumes_exactly():
    tasks = math_tasks(seed=0)[:10]
    a = TaskSampler(tasks, seed=5)
    a.next(7)
    state = a.state()
    expected = [t.id for t in a.next(25)]
    b = TaskSampler(tasks, seed=5)
    b.load_state(state)
    assert [t.id for t in b.next(25)] == expected
    # every epoch covers each task once
    c = TaskSampler(tasks, seed=1)
    assert sorted(t.id for t in c.next(10)) == sorted(t.id for t in tasks)
