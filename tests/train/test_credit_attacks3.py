"""Credit attacks, third read: a failing episode cut by the runner (or ended with no verdict) against the
worst answer with the same tokens, under the credit options the earlier reads checked one by one --
per-turn process credit, ``rl.dedup`` and the attempt discount -- together, token by token.

The earlier cases (``test_failing_never_pays.py``) compare one advantage per episode without process
credit or deduplication. Here every action token's advantage as the update applies it (``rewards_of``,
``group_advantages``, ``process_advantages``, ``build_batch``'s mask) must not exceed what the same token
earns when the episode instead ends answering wrong with no credit (the failure floor's verdict), for
every weighting, estimator, dedup, process coefficient and discount. All held already; standing cases.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from test_failing_never_pays import WEIGHTINGS

from posttrain.algo import ADVANTAGES
from posttrain.train._credit import process_advantages, rewards_of
from posttrain.train.grpo import build_batch, group_advantages
from posttrain.train.recipe import RLConfig
from posttrain.types import Trajectory, Turn, Verdict
from posttrain.verify.rewards import RewardWeights

CONFIGS = list(itertools.product(
    WEIGHTINGS.values(),
    [(name, std) for name in ADVANTAGES for std in (True, False)],
    (False, True),  # rl.dedup
    (0.0, 0.1, 1.0),  # process_coef
    (1.0, 0.5),  # attempt_discount
))

PASS = Verdict("pass", 1.0)


def fail(fmt: float = 0.0, process: float = 0.0) -> Verdict:
    return Verdict("fail", 0.0, error_class="wrong_answer", components={"outcome": 0.0, "format": fmt, "process": process})


def turn(first: int, n: int, verdict: Verdict | None, stop: str = "eos") -> Turn:
    return Turn((1, 2, 3), tuple(range(first, first + n)), (-0.5,) * n, stop, verdict)


def episode(*turns: Turn, cut_by: str | None = None, idx: int = 3) -> Trajectory:
    verdicts = [t.verdict for t in turns if t.verdict is not None]
    return Trajectory("t", "g", idx, turns, verdicts[-1].reward if verdicts else 0.0,
                      truncated=cut_by is not None, cut_by=cut_by)  # type: ignore[arg-type]


OTHERS = [episode(turn(100, 5, PASS), idx=0), episode(turn(200, 8, fail(1.0, 0.5)), turn(210, 6, fail(1.0)), idx=1),
          episode(turn(300, 12, fail()), idx=2)]


def token_advantages(group: list[Trajectory], w: RewardWeights, est: tuple[str, bool], dedup: bool, coef: float,
                     discount: float) -> tuple[torch.Tensor, torch.Tensor]:  # the last row's (T,) advantages and mask
    rewards, _ = rewards_of([group], w, attempt_discount=discount)
    adv = group_advantages([group], rewards, RLConfig(advantage=est[0], scale_by_std=est[1], dedup=dedup))
    batch = build_batch([group], rewards, pad_id=0)
    width = batch.input_ids.shape[1]
    per_token = (process_advantages([group], adv, width, w, process_coef=coef) if coef > 0
                 else adv.reshape(-1, 1).repeat(1, width))
    return per_token[-1], batch.loss_mask[-1]


def worst_answer(x: Trajectory) -> Trajectory:
    """``x`` ending instead with a wrong answer of no credit on its last turn (the same tokens)."""
    return episode(*x.turns[:-1], dataclasses.replace(x.turns[-1], verdict=fail()))


WAYS = {  # failing without answering on the last turn: cut by a limit, or ended with no verdict
    "cut after two credited attempts": episode(turn(400, 10, fail(1.0, 1.0)), turn(410, 10, fail(1.0, 0.5)),
                                               turn(420, 10, None), cut_by="max_turns"),
    "cut after a better attempt than its last": episode(turn(400, 10, fail(1.0, 1.0)), turn(410, 10, fail()),
                                                        turn(420, 30, None, "length"), cut_by="max_tokens"),
    "cut right after a credited attempt": episode(turn(400, 20, fail(1.0)), turn(420, 20, fail(1.0, 1.0)),
                                                  cut_by="max_turns"),
    "cut before any verdict": episode(turn(400, 30, None), turn(430, 50, None, "length"), cut_by="max_tokens"),
    "ends with no verdict": episode(turn(400, 70, None)),
}


@pytest.mark.parametrize("way", list(WAYS))
def test_no_token_of_a_cut_episode_earns_more_than_answering_wrong(way):
    """Process credit compares an earlier attempt with the last verdict, and a cut episode's last
    verdict is not its reward (the floor is): its earlier attempts must still never earn more per token
    than the same attempts followed by the worst wrong answer; and its row is never masked."""
    x = WAYS[way]
    honest = worst_answer(x)
    for w, est, dedup, coef, discount in CONFIGS:
        got, mask = token_advantages([*OTHERS, x], w, est, dedup, coef, discount)
        ref, ref_mask = token_advantages([*OTHERS, honest], w, est, dedup, coef, discount)
        assert torch.equal(mask, ref_mask) and mask.sum() == sum(len(t.action_ids) for t in x.turns)
        on = mask > 0
        assert bool((got[on] <= ref[on] + 1e-6).all()), (way, w, est, dedup, coef, discount, (got - ref)[on].max())


def test_a_copy_of_a_cut_failure_is_trained_as_its_first_copy():
    """With ``rl.dedup`` a cut episode repeated in its group counts once in the baseline, and the copy is
    trained token by token as its first copy is (never masked), and never above the worst answer."""
    cut = WAYS["cut after two credited attempts"]
    first = dataclasses.replace(cut, sample_idx=2)
    group = [*OTHERS[:2], first, cut]
    for w, est, _, coef, discount in CONFIGS:
        rewards, _ = rewards_of([group], w, attempt_discount=discount)
        adv = group_advantages([group], rewards, RLConfig(advantage=est[0], scale_by_std=est[1], dedup=True))
        batch = build_batch([group], rewards, pad_id=0)
        per_token = process_advantages([group], adv, batch.input_ids.shape[1], w, process_coef=coef)
        assert torch.equal(batch.loss_mask[3], batch.loss_mask[2]) and batch.loss_mask[3].sum() > 0
        assert torch.equal(per_token[3], per_token[2]), (w, est, coef, discount)
        honest = [*OTHERS[:2], first, dataclasses.replace(worst_answer(cut), sample_idx=3)]
        ref, _ = token_advantages(honest, w, est, True, coef, discount)
        on = batch.loss_mask[3] > 0
        assert bool((per_token[3][on] <= ref[on] + 1e-6).all()), (w, est, coef, discount)


def test_a_queued_batch_is_credited_alike_after_a_resume():
    """With ``rl.max_staleness`` > 0 a checkpoint holds the batches in flight as JSON; the resumed run
    credits them. A cut episode must come back cut (the floor, not its last attempt's credit), a dropped
    group dropped, and copies still copies: the same rewards, advantages and mask as before."""
    import json

    from posttrain.train._overlap import Batch, batches_from_json, batches_to_json
    from posttrain.types import Task

    cut = WAYS["cut after two credited attempts"]
    infra = episode(turn(500, 4, Verdict.infra("sandbox died", error_class="infra:sandbox")))
    groups = [[*OTHERS[:2], dataclasses.replace(cut, sample_idx=2), cut],
              [dataclasses.replace(t, group_id="h") for t in (*OTHERS, infra)]]
    task = Task(id="t", domain="test", prompt="?", fields={})
    saved = json.loads(json.dumps(batches_to_json([Batch(3, 2, [task, task], groups, {}, {})], 1)))
    [back] = batches_from_json(saved, 1, {"t": task}, after={})
    w, cfg = WEIGHTINGS["all"], RLConfig(dedup=True)
    before, _ = rewards_of(groups, w, attempt_discount=0.5)
    after, _ = rewards_of(back.groups, w, attempt_discount=0.5)
    assert before[1].isnan().all() and torch.equal(before[0], after[0]) and after[1].isnan().all()
    assert [t.cut_by for g in back.groups for t in g] == [t.cut_by for g in groups for t in g]
    assert torch.equal(group_advantages(groups, before, cfg), group_advantages(back.groups, after, cfg))
    assert torch.equal(build_batch(groups, before, pad_id=0).loss_mask, build_batch(back.groups, after, pad_id=0).loss_mask)
