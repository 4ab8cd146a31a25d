"""Property tests of the advantage estimators over random reward groups, several seeds: what one sample
can get from its group's statistics.

- No completion gets an unbounded advantage. GRPO's z-score is bounded by the group's size alone; so
  is each estimator here. The leave-one-out std of RLOO (``scale_by_std=True``, NeMo-RL's estimator)
  is the spread of the *other* samples: where they are (nearly) equal, one lucky or unlucky completion
  was divided by ~0, +52 for a pass among seven failures one of which had 0.05 partial credit, +2638
  with 0.001, -2638 for the one failure among near-equal passes; with the others exactly equal it fell
  back to the unscaled difference, in reward units (x10 for rewards scaled by 10).
- A failing episode, a cut one scored the least a failure can (``failure_floor``), never escapes its
  negative advantage: in a group with signal the least reward gets < 0, the best > 0, and a worse
  reward never gets more than a better one.
- An errored (NaN) score is left out of its group's statistics, not counted as 0, and gets 0.
- A group whose rewards are all equal gets exactly 0, whatever the rest of the batch.
"""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algo import ADVANTAGES

SEEDS = range(6)
SETTINGS = [(name, std, ddof) for name in ADVANTAGES for std in (True, False) for ddof in (1, 0)]
GROUP_SIZES = (2, 3, 4, 8, 16)


def _groups(seed: int, g: int, dtype: torch.dtype) -> torch.Tensor:
    """(N, g) rewards of several families: binary, graded (format/process/length-like weights),
    one outlier among equal or nearly equal others (spread 1e-1 .. 1e-6, or exactly 0), rewards
    scaled by 10, continuous; some rows with NaN (infra errors)."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(8):
        rows.append(torch.randint(0, 2, (g,), generator=gen).double())  # binary
        grid = torch.tensor([0.0, 0.2, 0.5, 0.7, 1.0, 1.2, -0.3])  # outcome + format + process, length cut
        rows.append(grid[torch.randint(0, len(grid), (g,), generator=gen)].double())
        for k in (1, 2, 3, 4, 5, 6, None):  # one outlier, the others equal up to 10^-k
            base = float(torch.rand((), generator=gen))
            row = torch.full((g,), base, dtype=torch.float64)
            if k is not None:
                row += 10.0 ** -k * torch.rand(g, generator=gen, dtype=torch.float64)
            row[int(torch.randint(0, g, (), generator=gen))] = float(torch.randint(0, 2, (), generator=gen)) * 2 - 1
            rows.append(row)
        rows.append(10 * torch.randint(0, 2, (g,), generator=gen).double())  # rewards x 10
        rows.append(torch.rand(g, generator=gen, dtype=torch.float64))
    r = torch.stack(rows).to(dtype)
    nan = torch.rand(r.shape, generator=gen) < 0.1
    nan[: len(rows) // 2] = False  # half the rows whole
    return torch.where(nan, torch.full_like(r, math.nan), r)


def _bound(name: str, std: bool, ddof: int, row: torch.Tensor, kept: int) -> float:
    """The largest |advantage| a sample of ``row`` (its finite rewards) may get. z-scores: a sample is
    at most sqrt((n-1)(n-ddof)/n) of its n-sample std from their mean; RLOO's leave-one-out std is
    floored at half the group's (2 sqrt(n(n-ddof)/(n-1))); reinforce_pp whitens ``kept`` samples of
    the batch. Unscaled: the reward range (RLOO: times n/(n-1))."""
    x = row[torch.isfinite(row)].double()
    n = x.numel()
    if n < 2:
        return 0.0
    spread = float(x.max() - x.min())
    if not std:
        return spread * (n / (n - 1) if name == "rloo" else 1.0)
    if name == "grpo":
        return math.sqrt((n - 1) * (n - ddof) / n)
    if name == "rloo":
        return 2 * math.sqrt(n * (n - ddof) / (n - 1))
    return math.sqrt((kept - 1) * (kept - ddof) / kept)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("name", "std", "ddof"), SETTINGS)
def test_no_completion_gets_an_unbounded_advantage(seed: int, name: str, std: bool, ddof: int) -> None:
    for g in GROUP_SIZES:
        for dtype in (torch.float32, torch.float64):
            r = _groups(seed, g, dtype)
            adv = ADVANTAGES[name](r, scale_by_std=std, ddof=ddof)
            assert torch.isfinite(adv).all()
            kept = int((torch.isfinite(r) & (torch.isfinite(r).sum(-1, keepdim=True) >= 2)).sum())
            for i in range(r.shape[0]):
                bound = _bound(name, std, ddof, r[i], kept)
                top = float(adv[i].abs().max())
                assert top <= bound * (1 + 1e-4) + 1e-6, (g, dtype, r[i].tolist(), adv[i].tolist(), bound)


@pytest.mark.parametrize("delta", [0.05, 1e-3, 1e-5, 1e-7, 0.0])
def test_a_lone_pass_among_nearly_equal_failures(delta: float) -> None:
    """[1, 0 x 6, delta]: the pass's RLOO-std advantage is the same size however small the partial
    credit delta (before: +52, +2638, +2e5, +9.6e5, and +1.0 at delta = 0), and a lone failure among
    near-equal passes mirrors it."""
    r = torch.tensor([[1.0] + [0.0] * 6 + [delta], [0.0] + [1.0] * 6 + [1.0 - delta]], dtype=torch.float64)
    adv = ADVANTAGES["rloo"](r, scale_by_std=True)
    assert 2.0 < float(adv[0, 0]) <= 2 * math.sqrt(8) + 1e-9, adv
    assert -2 * math.sqrt(8) - 1e-9 <= float(adv[1, 0]) < -2.0, adv


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("name", "std", "ddof"), SETTINGS)
def test_a_cut_failing_episode_never_escapes_its_negative_advantage(seed: int, name: str, std: bool,
                                                                    ddof: int) -> None:
    """Each row gets one more sample, cut and scored the least a failure can (the row's least reward,
    or below it): in a row with signal it gets < 0, the row's best > 0, and advantages are in the
    order of the rewards (a worse reward never gets more)."""
    for g in GROUP_SIZES:
        for dtype in (torch.float32, torch.float64):
            r = _groups(seed, g, dtype)
            finite_min = torch.where(torch.isfinite(r), r, torch.full_like(r, math.inf)).amin(-1, keepdim=True)
            floor = torch.where(torch.isfinite(finite_min), finite_min, torch.zeros_like(finite_min))
            below = torch.rand(floor.shape, generator=torch.Generator().manual_seed(seed)) < 0.5
            r = torch.cat([r, torch.where(below, floor - 0.25, floor)], dim=-1)
            adv = ADVANTAGES[name](r, scale_by_std=std, ddof=ddof)
            assert torch.isfinite(adv).all()
            for i in range(r.shape[0]):
                ok = torch.isfinite(r[i])
                x, a = r[i][ok], adv[i][ok]
                if x.numel() < 2 or x.max() == x.min():
                    assert (adv[i] == 0).all(), (r[i].tolist(), adv[i].tolist())
                    continue
                assert (a[x == x.min()] < 0).all(), (g, dtype, r[i].tolist(), adv[i].tolist())
                assert (a[x == x.max()] > 0).all(), (g, dtype, r[i].tolist(), adv[i].tolist())
                worse, better = x.unsqueeze(1) < x.unsqueeze(0), a.unsqueeze(1) > a.unsqueeze(0)
                assert not (worse & better).any(), (g, dtype, r[i].tolist(), adv[i].tolist())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("name", "std", "ddof"), SETTINGS)
def test_an_errored_score_is_left_out_not_counted_as_zero(seed: int, name: str, std: bool, ddof: int) -> None:
    """A row with NaN rewards: its finite samples get the estimator's advantages over the finite
    rewards alone (one row at a time: reinforce_pp whitens over the batch), its NaN samples exactly 0."""
    fn = ADVANTAGES[name]
    for g in GROUP_SIZES[1:]:
        r = _groups(seed, g, torch.float64)
        for row in r:
            ok = torch.isfinite(row)
            if ok.all():
                continue
            got = fn(row[None], scale_by_std=std, ddof=ddof)[0]
            assert (got[~ok] == 0).all(), (row.tolist(), got.tolist())
            alone = fn(row[ok][None], scale_by_std=std, ddof=ddof)[0] if ok.any() else got[ok]
            assert torch.allclose(got[ok], alone, rtol=1e-9, atol=1e-12), (row.tolist(), got.tolist())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("name", "std", "ddof"), SETTINGS)
def test_a_group_failing_alike_gets_exactly_zero_in_any_batch(seed: int, name: str, std: bool, ddof: int) -> None:
    """Rows of equal rewards (all failing alike, at a value whose float mean may miss it by an ulp)
    among random rows: exactly 0, so that nothing pushes the group up or down."""
    for g in GROUP_SIZES:
        for dtype in (torch.float32, torch.float64):
            r = _groups(seed, g, dtype)
            equal = torch.tensor([[v] * g for v in (0.2, 0.7, 1 / 3, -0.3, 0.0)], dtype=dtype)
            adv = ADVANTAGES[name](torch.cat([r, equal]), scale_by_std=std, ddof=ddof)
            assert (adv[-len(equal):] == 0).all(), (g, dtype, adv[-len(equal):].tolist())
