"""An evaluation sample lost to infra takes only itself: the scheduler never drops the other samples
of its task, finished or still queued, so slow failures left pending cannot leave pass@1's denominator.

A group that runs out of infra tries is dropped whole (``Service``: its queued jobs never run), which
is right for a training group (its advantages need every member) and would bias an evaluation: the
samples that finished first are counted, the ones still queued are not. Evaluation therefore puts
each sample in a group of its own (``rollout.episodes.sample_tasks``; ``evaluate.runner.score_responses``
submits jobs with no group, each its own). One worker and one try make the order fixed: the lost
sample runs second, two failing samples wait behind it."""

from __future__ import annotations

import pytest

from posttrain.evaluate.records import trajectory_records
from posttrain.evaluate.runner import Response, score_responses
from posttrain.evaluate.summary import summarize
from posttrain.policy import SamplingParams
from posttrain.rollout import SingleTurnEnv
from posttrain.rollout.episodes import Episodes, sample_tasks
from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service
from posttrain.types import Generation, Task, Verdict

ANSWERS = ["right", "flaky", "wrong", "wrong"]  # sample 1 is lost to infra; 2 and 3 fail behind it
TASK = Task(id="t0", domain="arith", prompt="1+1?", fields={})


def verify(task: Task, response: str) -> Verdict:
    if response == "flaky":
        return Verdict.infra("sandbox died")
    return Verdict("pass", 1.0) if response == "right" else Verdict("fail", 0.0)


class OneSlot(LocalBackend):
    """The local backend with one worker slot: jobs run one at a time, in the order queued."""

    def __init__(self) -> None:
        super().__init__({"arith": DomainHooks(verify)})
        self.nodes = ["local"]


class Scripted:
    """A sampler whose i-th prompt of a call gets ``ANSWERS[i]``."""

    def generate(self, prompt_ids, params):
        return [Generation(tuple(p), (7,), (0.0,), ANSWERS[i], "eos") for i, p in enumerate(prompt_ids)]


def test_sampled_episodes_lost_to_infra_take_only_their_own_sample():
    with Service(OneSlot(), SchedPolicy(max_tries=1)) as svc:
        plan = Episodes("single", lambda task, gid, i: SingleTurnEnv(svc, lambda text: [1, 2], group_id=gid,
                                                                      sample_idx=i), None, 1)
        [group] = sample_tasks(plan, Scripted(), [TASK], n=4, params=SamplingParams(temperature=1.0, max_new_tokens=1),
                               service=svc, stage="eval")
        assert svc.stats()["samples_dropped"] == 1
    recs = [r for tr in group for r in trajectory_records(TASK, tr, stage="eval", step=None, wall_s=0.0)]
    assert [r.outcome for r in recs] == ["pass", "infra_error", "fail", "fail"]
    s = summarize(recs, ks=(1,), n_boot=10)
    assert (s["pass@1"], s["n_samples"], s["infra_dropped_samples"]) == (pytest.approx(1 / 3), 3, 1)  # 1.0 with the queue dropped


def test_scored_responses_lost_to_infra_take_only_their_own_sample():
    responses = [Response("t0", a, sample_idx=i) for i, a in enumerate(ANSWERS)]
    with Service(OneSlot(), SchedPolicy(max_tries=1)) as svc:
        recs = score_responses([TASK], responses, svc)
        assert svc.stats()["samples_dropped"] == 1
    assert [r.outcome for r in recs] == ["pass", "infra_error", "fail", "fail"]
    s = summarize(recs, ks=(1,), n_boot=10)
    assert (s["pass@1"], s["n_samples"], s["infra_dropped_samples"]) == (pytest.approx(1 / 3), 3, 1)
