"""An episode its environment ends with no verdict (an action that quits) is a sample that failed: it
has a ``fail`` record, so it stays in the denominators. Training already scores it the failure floor
(``train._credit.episode_reward``); the records gave it none, so it left the evaluation: quitting on
the tasks it would fail raised a model's pass@1 from 0.25 to 0.5 here, and a task all of whose samples
quit was not even counted among the tasks (fails on the old ``trajectory_records``)."""

from __future__ import annotations

from posttrain.evaluate.records import trajectory_records
from posttrain.evaluate.summary import summarize
from posttrain.policy import Generation, SamplingParams
from posttrain.rollout import Episode, run_batch
from posttrain.types import Observation, StepResult, Task, Verdict


class QuitEnv:
    """One answer judged; the action ``quit`` ends the episode with no verdict (an Env may)."""

    def reset(self, task: Task) -> Observation:
        return Observation((1, 2), "solve it, or say quit")

    def step(self, action: Generation) -> StepResult:
        if action.text == "quit":
            return StepResult(Observation(()), None, True)
        return StepResult(Observation(()), Verdict("pass", 1.0) if action.text == "right" else Verdict("fail", 0.0),
                          True)

    def close(self) -> None:
        pass


class Script:
    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def generate(self, prompts, params):
        return [Generation(tuple(p), (9,), (0.0,), t, "eos") for p, t in zip(prompts, self.texts, strict=True)]


def test_an_episode_ended_without_a_verdict_is_a_failed_sample_in_the_rates():
    tasks = [Task(id=f"t{i}", domain="tool", prompt="?", fields={}) for i in range(3)]
    texts = ["right", "quit", "quit", "wrong", "quit", "quit"]  # t2: every sample quits
    runs = [Episode(t, QuitEnv(), f"eval/{t.id}/{i}", i) for t in tasks for i in range(2)]
    trajs = run_batch(Script(texts), runs, SamplingParams(max_new_tokens=4), max_turns=2)
    records = [r for k, tr in enumerate(trajs)
               for r in trajectory_records(tasks[k // 2], tr, stage="eval", step=None, wall_s=0.0)]
    assert len(records) == 6
    quit_ = [r for r in records if r.completion == "quit"]
    assert {(r.outcome, r.reward, r.error_class) for r in quit_} == {("fail", 0.0, "no_verdict")}
    s = summarize(records, ks=(1, 2))
    assert (s["pass@1"], s["n_tasks"], s["n_samples"], s["infra_errors"]) == (1 / 6, 3, 6, 0)
    assert s["pass@2"] == 1 / 3
