"""Repair episodes on the Ray backend (real local cluster, loopback): each episode's steps run in the
driver as the service's Step jobs, and each attempt is verified through the service's nested lane on
the cluster's sandbox-pool actor (``Service.verifier``), so no verifier of the driver's own is needed
(the former ``Service.verifiers`` raised for Ray: repair episodes could not run there)."""

from __future__ import annotations

import re

import pytest

from posttrain.cli import domain_hooks
from posttrain.policy import Generation, Policy, SamplingParams, build_char_tokenizer
from posttrain.rollout import run_batch
from posttrain.rollout.episodes import make_episodes
from posttrain.sched import RayBackend, Service, local_cluster
from posttrain.tasks import generators

pytestmark = pytest.mark.slow

TOK = build_char_tokenizer()


@pytest.fixture(scope="module")
def address():
    from posttrain.sandbox import HostCannotIsolate, open_pool

    try:
        open_pool(size=1).close()
    except HostCannotIsolate as e:
        pytest.skip(f"this host cannot run the sandbox: {e}")
    with local_cluster(num_cpus=2) as addr:
        yield addr


class FeedbackReader:
    """A scripted sampler: guesses until its context shows a failed visible test, then reads the
    expected value off the feedback."""

    def generate(self, prompt_ids, params):
        out = []
        for ids in prompt_ids:
            context = TOK.decode(ids, skip_special_tokens=True)
            var = context.rsplit("def ", 1)[1].split("(", 1)[1].split(")", 1)[0]
            shown = re.findall(r"assert candidate\(0\) == 0\+(\d+)", context)
            text = f"    return {var}+{shown[-1]}\n" if shown else f"    return {var}\n"
            action = (*TOK(text, add_special_tokens=False)["input_ids"], TOK.eos_token_id)
            out.append(Generation(tuple(ids), action, (0.0,) * len(action), text, "eos"))
        return out


def test_repair_episodes_verify_through_the_nested_lane_on_ray(address):
    tasks = generators.repair_tasks(seed=0)[:3]
    with Service(RayBackend(address, domains=["code"], hooks=domain_hooks)) as svc:
        plan = make_episodes("repair", tasks, Policy(None, TOK), service=svc, verify=svc.verifier())
        runs = plan.episodes(tasks, [f"ray-repair/{t.id}" for t in tasks], 2)
        trajs = run_batch(FeedbackReader(), runs, SamplingParams(max_new_tokens=30), max_turns=plan.max_turns,
                          service=svc)
        stats = svc.stats()
        nested = [a for a in svc.attempts if a.group_id == "~nested"]
    assert [[v.outcome for v in t.verdicts] for t in trajs] == [["fail", "pass"]] * 6
    assert all("Test failed: assert candidate(0) == 0+" in TOK.decode(t.turns[1].observation_ids) for t in trajs)
    # one try per distinct (task, attempt): the two samples of a task share the episodes' verdict cache
    assert stats["nested"] == len(nested) == 6 and {a.node for a in nested} <= set(svc.backend.nodes)
    assert stats["groups_dropped"] == 0 and stats["restarts"] == 0
