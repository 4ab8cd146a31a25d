"""The episode runner: token-exact trajectories over a real sampler and real environments.

Pitfalls tested (../shared/reference/episodes.md): trajectory ids are every observation plus every
sampled id, in order; observations are appended as ids, never re-tokenized (a case where re-encoding
gives other ids); mask, ids and logprobs stay equal length; the trainer scores the sampled ids; the
token budget spans turns; groups are carried.
"""

import sys
import threading
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "policy"))
from _tiny_lm import bpe_tokenizer, tiny_llama  # noqa: E402

from posttrain.cli import open_service  # noqa: E402
from posttrain.envs import (
    VerdictCache,
    get_domain,  # noqa: E402
)
from posttrain.policy import Generation, LocalSampler, SamplingParams, build_embedded_default, load_policy  # noqa: E402
from posttrain.rollout import Episode, SingleTurnEnv, run_batch, run_episode
from posttrain.train._batch import collate  # noqa: E402
from posttrain.train._logprobs import token_logprobs  # noqa: E402
from posttrain.types import Observation, Rollout, StepResult, Task, Verdict  # noqa: E402

T = 1.0


class SpySampler:
    """A real sampler that also records every context it was asked to continue."""

    def __init__(self, sampler):
        self.sampler, self.calls = sampler, []

    def generate(self, prompt_ids, params):
        self.calls.append(([list(p) for p in prompt_ids], params))
        return self.sampler.generate(prompt_ids, params)


class RetryEnv:
    """A repair-style test environment: an answer passes when its text contains "ab"; after a failed
    one the environment inserts " ?" (as ids) and asks again, ``attempts`` times at most."""

    def __init__(self, tok, attempts: int = 3):
        self.tok, self.attempts, self.n = tok, attempts, 0

    def reset(self, task):
        return Observation(tuple(self.tok(task.prompt)["input_ids"]), task.prompt)

    def step(self, action: Generation):
        self.n += 1
        ok = "ab" in action.text
        verdict = Verdict("pass", 1.0) if ok else Verdict("fail", 0.0, feedback="no ab")
        obs = () if ok or self.n >= self.attempts else tuple(self.tok(" ?", add_special_tokens=False)["input_ids"])
        return StepResult(Observation(obs, " ?" if obs else ""), verdict, ok or self.n >= self.attempts)

    def close(self):
        pass


@pytest.fixture(scope="module")
def bpe_lm():
    tok = bpe_tokenizer()
    return tiny_llama(tok, eos_like="?"), tok


def task(i: int) -> Task:
    return Task(id=f"t{i}", domain="test", prompt="a b" if i % 2 else "ba", fields={})


def test_multi_turn_ids_are_exact_and_never_re_tokenized(bpe_lm):
    model, tok = bpe_lm
    spy = SpySampler(LocalSampler(model, tok))
    episodes = [Episode(task(i), RetryEnv(tok), group_id=f"g{i // 4}", sample_idx=i % 4) for i in range(16)]
    trajs = run_batch(spy, episodes, SamplingParams(temperature=T, max_new_tokens=10, seed=0), max_turns=3)

    assert [(t.task_id, t.group_id, t.sample_idx) for t in trajs] == [
        (e.task.id, e.group_id, e.sample_idx) for e in episodes]
    contexts = [ctx for call, _ in spy.calls for ctx in call]
    for traj in trajs:
        assert len(traj.ids) == len(traj.loss_mask) == len(traj.logprobs)
        assert traj.attempts == len(traj.turns) and traj.reward == traj.verdicts[-1].reward
        seen: list[int] = []
        for turn in traj.turns:  # every context the sampler saw is the exact concatenation so far
            seen += turn.observation_ids
            assert seen in contexts
            seen += turn.action_ids
        assert tuple(seen) == traj.ids
        mask = [m for turn in traj.turns for m in [0] * len(turn.observation_ids) + [1] * len(turn.action_ids)]
        assert list(traj.loss_mask) == mask
    assert any(len(t.turns) > 1 for t in trajs) and any(t.reward == 1.0 for t in trajs)

    a, b = (tok.convert_tokens_to_ids(x) for x in "ab")
    split = [turn.action_ids for t in trajs for turn in t.turns
             if any(x == (a, b) for x in zip(turn.action_ids, turn.action_ids[1:], strict=False))]
    assert split, "no action sampled 'a' then 'b'"
    action = split[0]
    text = tok.decode(list(action), skip_special_tokens=True)
    assert tok(text, add_special_tokens=False)["input_ids"] != [i for i in action if i != tok.eos_token_id]
    # the trainer scores exactly the sampled ids: its log-probs equal the sampling ones
    rows = collate([t.ids for t in trajs], [[] for _ in trajs], pad_id=tok.pad_token_id)
    mask = torch.zeros_like(rows.input_ids, dtype=torch.float32)
    for i, t in enumerate(trajs):
        mask[i, : len(t.ids)] = torch.tensor(t.loss_mask, dtype=torch.float32)
    with torch.no_grad():
        scored = token_logprobs(model, rows.input_ids, rows.attention_mask, loss_mask=mask, temperature=T)
    for i, t in enumerate(trajs):
        assert torch.allclose(scored[i, : len(t.ids)], torch.tensor(t.logprobs), atol=1e-4)


def test_token_budget_spans_turns_and_turn_limit_truncates(bpe_lm):
    model, tok = bpe_lm
    sampler = LocalSampler(model, tok)
    episodes = [Episode(task(i), RetryEnv(tok, attempts=5), group_id="g", sample_idx=i) for i in range(12)]
    trajs = run_batch(sampler, episodes, SamplingParams(temperature=T, max_new_tokens=8, seed=1),
                      max_turns=5, max_tokens=14)
    for t in trajs:
        after_prompt = len(t.ids) - len(t.prompt_ids)
        assert after_prompt <= 14
        done = t.reward == 1.0 or t.attempts == 5
        assert t.truncated == (not done or t.turns[-1].stop_reason == "length")
    assert any(t.truncated for t in trajs) and any(not t.truncated for t in trajs)
    one = run_episode(sampler, Episode(task(0), RetryEnv(tok, attempts=5), "g"),
                      SamplingParams(temperature=T, max_new_tokens=4, seed=2), max_turns=1)
    assert len(one.turns) == 1 and (one.truncated or one.reward == 1.0)


def test_single_turn_adapter_is_todays_rollout(tmp_path):
    """One-step episodes through the service give exactly what sampling the policy (``Policy.generate``)
    and verifying each answer through the service's ``verify_pairs`` gives (the text-level path the
    evaluations took before), and what the verifier alone says."""
    policy = load_policy(build_embedded_default(tmp_path / "m"))
    math = get_domain("math")
    tasks = math.generate_tasks(3, seed=0)
    verify, by_id = math.make_verifier(None), {t.id: t for t in tasks}
    with open_service(["math"]) as svc:
        gens = policy.generate([t.prompt for t in tasks], n=4, temperature=T, max_new_tokens=12, seed=5)
        verdicts = iter(svc.verify_pairs([(t, g.text) for t, gs in zip(tasks, gens, strict=True) for g in gs]))
        old = [[Rollout(t.id, i, g.prompt_ids, g.completion_ids, g.logprobs, g.text, g.finish_reason, next(verdicts))
                for i, g in enumerate(gs)] for t, gs in zip(tasks, gens, strict=True)]
        episodes = [Episode(t, SingleTurnEnv(svc, policy.encode_prompt, group_id=t.id, sample_idx=i), group_id=t.id,
                            sample_idx=i) for t in tasks for i in range(4)]
        new = run_batch(policy.sampler(), episodes, SamplingParams(temperature=T, max_new_tokens=12, seed=5))
        for r, traj in zip([r for g in old for r in g], new, strict=True):
            [turn] = traj.turns
            assert (traj.task_id, traj.sample_idx) == (r.task_id, r.sample_idx)
            assert (traj.prompt_ids, turn.action_ids, turn.logprobs) == (r.prompt_ids, r.completion_ids, r.logprobs)
            assert turn.verdict == r.verdict == verify(by_id[traj.task_id], turn.text)
            assert traj.reward == r.verdict.reward and traj.truncated == (r.finish_reason == "length")
        ref = Generation((), (), (), tasks[0].reference, "eos")
        for i in range(2):  # the second is the service's cache hit
            env = SingleTurnEnv(svc, policy.encode_prompt, group_id="ref", sample_idx=i)
            env.reset(tasks[0])
            hits = svc.stats()["cache_hits"]
            result = env.step(ref)
            assert (result.verdict, result.done) == (verify(tasks[0], tasks[0].reference), True)
        assert svc.stats()["cache_hits"] == hits + 1


def test_verdict_cache_verifies_concurrent_duplicates_once():
    cache, calls = VerdictCache(), []

    def verify():
        calls.append(1)
        time.sleep(0.05)
        return Verdict("pass", 1.0)

    threads = [threading.Thread(target=cache.compute, args=(("t", "x"), verify)) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(calls) == 1 and cache.hits == 7
    flaky = iter([Verdict.infra("down"), Verdict("fail", 0.0)])
    assert cache.compute(("t", "y"), lambda: next(flaky)).is_infra_error
    assert cache.compute(("t", "y"), lambda: next(flaky)).outcome == "fail"  # infra errors are not cached


# -- stateful episodes through the service: a step is a job; an infra error restarts the episode ---------

def _repair_reader():
    """A scripted repair sampler over the char tokenizer: it guesses until a feedback line shows the
    expected value, then answers with it (deterministic: a replay sees the same contexts)."""
    import re

    from posttrain.policy import build_char_tokenizer

    tok = build_char_tokenizer()

    class Reader:
        def generate(self, prompt_ids, params):
            out = []
            for ids in prompt_ids:
                context = tok.decode(ids, skip_special_tokens=True)
                var = context.rsplit("def ", 1)[1].split("(", 1)[1].split(")", 1)[0]
                shown = re.findall(r"assert candidate\(0\) == 0\+(\d+)", context)
                text = f"    return {var} + {shown[-1] if shown else 1}\n"
                ids_out = tuple(tok(text, add_special_tokens=False)["input_ids"]) + (tok.eos_token_id,)
                out.append(Generation(tuple(ids), ids_out, (0.0,) * len(ids_out), text, "eos"))
            return out

    return Reader(), tok


class FlakyVerifier:
    """Beside the real code verifier: the calls numbered in ``fail_on`` (0-based, in call order) are
    infra errors, as a sandbox job whose process was killed would be; every other call is the real one."""

    def __init__(self, verify, fail_on):
        self.verify, self.fail_on, self.calls = verify, fail_on, 0
        self.lock = threading.Lock()

    def __call__(self, task, response):
        with self.lock:
            n, self.calls = self.calls, self.calls + 1
        if n in self.fail_on:
            return Verdict.infra("sandbox job killed", error_class="infra:sandbox")
        return self.verify(task, response)


@pytest.fixture(scope="module")
def code_service():
    from posttrain.sandbox import HostCannotIsolate
    from posttrain.sched import SchedPolicy

    try:
        with open_service(["code"], size=2, policy=SchedPolicy(max_tries=3, backoff_s=0.01)) as svc:
            yield svc
    except HostCannotIsolate as e:
        pytest.skip(f"this host cannot run the sandbox: {e}")


def _repair_runs(svc, tasks, verify, *, group="g"):
    from posttrain.envs import RepairEnv

    reader, tok = _repair_reader()

    def make(t):  # no cache and no retries of its own: every replayed attempt runs in the sandbox again
        return RepairEnv(verify, lambda s: list(tok(s)["input_ids"]),
                         lambda s: list(tok(s, add_special_tokens=False)["input_ids"]), infra_retries=0)

    runs = [Episode(t, make(t), f"{group}/{t.id}", 0, make) for t in tasks]
    return run_batch(reader, runs, SamplingParams(temperature=0.0, max_new_tokens=40), max_turns=3, service=svc)


def _view(traj):
    return (traj.ids, traj.loss_mask, traj.reward, traj.truncated,
            [(v.outcome, v.reward, v.feedback) for v in traj.verdicts])


def test_an_infra_error_mid_episode_restarts_it_from_its_initial_state(code_service):
    """A repair episode whose second attempt's sandbox job fails with infra is restarted in a fresh
    environment (its first attempt replayed in the real sandbox) and ends exactly as an uninterrupted one."""
    from posttrain.tasks import generators

    svc = code_service
    tasks = generators.repair_tasks(seed=0)[:2]
    real = svc.verifier()
    # each repair attempt is one verification (the code verifier runs visible and hidden tests):
    # calls 0-1 are the two tasks' first attempts (fail), 2.. their second attempts
    calm = _repair_runs(svc, tasks, FlakyVerifier(real, ()), group="calm")
    before = svc.stats()
    flaky = FlakyVerifier(real, {2})
    restarted = _repair_runs(svc, tasks, flaky, group="flaky")
    after = svc.stats()
    assert [_view(t) for t in restarted] == [_view(t) for t in calm]
    assert [[v.outcome for v in t.verdicts] for t in calm] == [["fail", "pass"]] * 2
    assert after["restarts"] - before["restarts"] == 1
    assert after["groups_dropped"] == before["groups_dropped"]
    steps = [a for a in svc.attempts if a.group_id.startswith("flaky/")]
    assert [a.outcome for a in steps].count("step:infra_error") == 1  # every step try recorded
    assert flaky.calls == 4 + 1 + 1  # 4 verifications, the failed one, the replayed first attempt


def test_an_episode_out_of_tries_drops_its_group_counted_never_scored(code_service):
    from posttrain.tasks import generators
    from posttrain.train.grpo import rewards_of
    from posttrain.verify.rewards import RewardWeights

    svc = code_service
    tasks = generators.repair_tasks(seed=0)[:1]
    before = svc.stats()
    always = FlakyVerifier(svc.verifier(), set(range(1, 100)))  # every call after the first attempt
    [traj] = _repair_runs(svc, tasks, always, group="lost")
    after = svc.stats()
    assert traj.verdicts[-1].error_class == "infra:exhausted" and traj.reward != traj.reward  # NaN
    assert after["restarts"] - before["restarts"] == 2  # max_tries 3: the first try and two restarts
    assert after["exhausted"] - before["exhausted"] == 1 and after["groups_dropped"] - before["groups_dropped"] == 1
    assert svc.is_dropped(traj.group_id)
    rewards, _ = rewards_of([[traj]], RewardWeights())
    assert torch.isnan(rewards).all()


class _Drifting:
    """An environment that is not deterministic given its actions: each instance numbers its
    observations from a different start, so a replay cannot rebuild the state."""

    made = 0

    def __init__(self, fail_at: int | None):
        _Drifting.made += 1
        self.start, self.fail_at, self.n = _Drifting.made, fail_at, 0

    def reset(self, task):
        return Observation((1, 2))

    def step(self, action):
        self.n += 1
        if self.n == self.fail_at:
            raise OSError("the environment's process died")
        return StepResult(Observation((100 + self.start,)), Verdict("fail", 0.0), self.n >= 3)

    def close(self):
        pass


class _Fixed:
    def generate(self, prompt_ids, params):
        return [Generation(tuple(p), (7,), (0.0,), "x", "eos") for p in prompt_ids]


def test_a_replay_that_differs_is_an_infra_loss_and_no_factory_means_no_restart():
    from posttrain.sched import SchedPolicy

    t = Task(id="d", domain="math", prompt="", fields={"answer": "1"})
    with open_service(["math"], policy=SchedPolicy(max_tries=4, backoff_s=0.0)) as svc:
        runs = [Episode(t, _Drifting(fail_at=2), "drift", 0, lambda _: _Drifting(fail_at=None)),
                Episode(t, _Drifting(fail_at=1), "no-factory", 0)]
        drift, alone = run_batch(_Fixed(), runs, SamplingParams(max_new_tokens=1), max_turns=3, service=svc)
        assert drift.verdicts[-1].error_class == "infra:exhausted" and "differs" in drift.verdicts[-1].evidence["detail"]
        assert alone.verdicts[-1].error_class == "infra:exhausted" and "no make_env" in alone.verdicts[-1].evidence["detail"]
        stats = svc.stats()
        assert (stats["restarts"], stats["exhausted"], stats["groups_dropped"]) == (1, 2, 2)


def test_a_given_up_group_counts_every_one_of_its_samples_dropped():
    """Four episodes of one group, one of which fails with infra on every try: the whole group is
    dropped and all four samples are counted (the service alone saw only the jobs in flight)."""
    from posttrain.cli import open_service
    from posttrain.sched import SchedPolicy

    boxes = iter(range(100))

    class FlakyEnv:  # a test double beside the real environments
        def __init__(self, fail: bool) -> None:
            self.fail, self.n, self.box = fail, 0, next(boxes)

        def reset(self, task):
            return Observation((1, 2))

        def step(self, action):
            self.n += 1
            if self.fail and self.n == 1:  # each box dies its own way: infra, not a bug that repeats
                raise OSError(f"box {self.box} died")
            return StepResult(Observation((9,)), Verdict("fail", 0.0), self.n >= 3)

        def close(self):
            pass

    class Scripted:
        def generate(self, prompts, params):
            return [Generation(tuple(p), (7,), (0.0,), "x", "eos") for p in prompts]

    task = Task(id="d", domain="math", prompt="", fields={"answer": "1"})
    with open_service(["math"], policy=SchedPolicy(max_tries=2, backoff_s=0.0)) as svc:
        runs = [Episode(task, FlakyEnv(i == 0), "G", i, make_env=lambda _: FlakyEnv(True)) for i in range(4)]
        run_batch(Scripted(), runs, SamplingParams(max_new_tokens=1), max_turns=3, service=svc)
        stats = svc.stats()
    assert (stats["exhausted"], stats["groups_dropped"], stats["samples_dropped"]) == (1, 1, 4)


def test_episodes_of_a_given_up_group_are_not_sampled_again():
    """Group G's first episode is lost at round 0 (infra, no factory to restart it): G's other
    episode used to get one more generate round, whose step then met the dropped group; now it ends
    at once (a last turn with no action, verdict infra:group_dropped, reward NaN), while group H's
    episode plays on. Counted in prompts per generate call."""
    from posttrain.sched import SchedPolicy

    class ThreeSteps:  # a test double beside the real environments
        def __init__(self, broken: bool = False) -> None:
            self.broken, self.n = broken, 0

        def reset(self, task):
            return Observation((1, 2))

        def step(self, action):
            self.n += 1
            if self.broken:
                raise OSError("the box died")
            return StepResult(Observation((9,)), Verdict("fail", 0.0), self.n >= 3)

        def close(self):
            pass

    class Counting:
        def __init__(self) -> None:
            self.prompts: list[int] = []

        def generate(self, prompts, params):
            self.prompts.append(len(prompts))
            return [Generation(tuple(p), (7,), (0.0,), "x", "eos") for p in prompts]

    task = Task(id="d", domain="math", prompt="", fields={"answer": "1"})
    sampler = Counting()
    with open_service(["math"], policy=SchedPolicy(max_tries=2, backoff_s=0.0)) as svc:
        runs = [Episode(task, ThreeSteps(broken=True), "G", 0), Episode(task, ThreeSteps(), "G", 1),
                Episode(task, ThreeSteps(), "H", 0)]
        lost, dropped, kept = run_batch(sampler, runs, SamplingParams(max_new_tokens=1), max_turns=3, service=svc)
        assert svc.stats()["samples_dropped"] == 2
    assert sampler.prompts == [3, 1, 1]  # was [3, 2, 1]: G's second episode sampled once more for nothing
    assert lost.verdicts[-1].error_class == "infra:exhausted"
    assert [len(t.action_ids) for t in dropped.turns] == [1, 0] and dropped.turns[-1].observation_ids == (9,)
    assert dropped.verdicts[-1].error_class == "infra:group_dropped" and dropped.reward != dropped.reward  # NaN
    assert not dropped.truncated and dropped.ids == (1, 2, 7, 9)
    assert [v.outcome for v in kept.verdicts] == ["fail"] * 3 and kept.reward == 0.0


class _Buggy:
    """A stateful environment with a deterministic bug at its second step (``error`` raised there),
    beside the real environments."""

    def __init__(self, error: Exception) -> None:
        self.error, self.n = error, 0

    def reset(self, task):
        return Observation((1, 2))

    def step(self, action):
        self.n += 1
        if self.n == 2:
            raise self.error
        return StepResult(Observation((9,)), Verdict("fail", 0.0), self.n >= 3)

    def close(self):
        pass


def _buggy_runs(error: Exception, service):
    task = Task(id="bug-task", domain="math", prompt="", fields={"answer": "1"})
    runs = [Episode(task, _Buggy(error), "B", i, make_env=lambda _: _Buggy(error)) for i in range(2)]
    return run_batch(_FixedSampler(), runs, SamplingParams(max_new_tokens=1), max_turns=3, service=service)


class _FixedSampler:
    def generate(self, prompt_ids, params):
        return [Generation(tuple(p), (7,), (0.0,), "x", "eos") for p in prompt_ids]


@pytest.mark.parametrize("error", [KeyError("answer"), TypeError("unsupported operand"), RuntimeError("bad state")])
def test_an_error_of_the_environment_surfaces_in_one_line_and_is_not_a_dropped_group(error):
    """A stateful step that raises a programming error was taken for infra: the episode restarted,
    the bug repeated, the group was dropped and only a count said so. Now it is raised at once, as
    a StepError naming the task, the environment, the step and the exception; nothing is restarted,
    dropped or counted against a breaker. Without a service too."""
    from posttrain.sched import SchedPolicy, StepError

    with open_service(["math"], policy=SchedPolicy(max_tries=3, backoff_s=0.0)) as svc:
        with pytest.raises(StepError) as e:
            _buggy_runs(error, svc)
        stats = svc.stats()
        steps = [a for a in svc.attempts if a.outcome == "step:error"]
    line = str(e.value)
    assert "\n" not in line and "task 'bug-task' (domain 'math', sample 0): environment _Buggy, step 1" in line
    assert f"{type(error).__name__}: {error}" in line and "not infra" in line and e.value.__cause__ is error
    assert (stats["restarts"], stats["groups_dropped"], stats["samples_dropped"], stats["infra_tries"]) == (0, 0, 0, 0)
    assert stats["breakers"] == {"domain:episode:math": "closed", "node:local": "closed"} and len(steps) == 2
    assert {a.error_class for a in steps} == {"env_error"}
    with pytest.raises(StepError, match=r"environment _Buggy, step 1: " + type(error).__name__):
        _buggy_runs(error, None)


def test_an_infra_kind_exception_that_repeats_identically_on_the_restart_is_an_error_of_the_environment():
    """A FileNotFoundError (an OSError: infra on its first try) that the restarted episode raises
    again with the same message at the same step is the environment's own bug: raised, not dropped."""
    from posttrain.sched import SchedPolicy, StepError

    error = FileNotFoundError(2, "No such file or directory", "/nonexistent/state.json")
    with open_service(["math"], policy=SchedPolicy(max_tries=3, backoff_s=0.0)) as svc:
        with pytest.raises(StepError, match=r"step 1: FileNotFoundError: .*state.json', again, identically, on the "
                                            r"restarted episode"):
            _buggy_runs(error, svc)
        stats = svc.stats()
    assert stats["restarts"] >= 1 and stats["groups_dropped"] == 0


@pytest.mark.parametrize("error", [MemoryError(), TimeoutError("timed out"), BrokenPipeError(32, "Broken pipe"),
                                   EOFError("")])
def test_a_resource_failure_that_repeats_identically_stays_infra_and_drops_the_group(error):
    """A flaky resource failure keeps its message (MemoryError has none, a broken pipe is always
    '[Errno 32] Broken pipe'), so "repeated identically" stopped the whole run with a StepError.
    Only the environment's own file errors are a bug when repeated; these use up the tries and the
    group is dropped, as any infra loss."""
    from posttrain.sched import SchedPolicy

    with open_service(["math"], policy=SchedPolicy(max_tries=3, backoff_s=0.0)) as svc:
        trajs = _buggy_runs(error, svc)
        stats = svc.stats()
    assert all(t.verdicts[-1].is_infra_error for t in trajs)
    assert "infra:exhausted" in {t.verdicts[-1].error_class for t in trajs}
    assert stats["groups_dropped"] == 1 and stats["restarts"] >= 1
