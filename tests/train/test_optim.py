"""The trainers' optimizer (posttrain/train/_optim.py): bf16 weights take the steps fp32 weights take,
because the optimizer steps an fp32 master copy; its state resumes exactly."""

import io

import pytest
import torch

from posttrain.train._optim import MasterWeightAdamW, adamw


def _weights(dtype: torch.dtype, n: int = 1000) -> torch.nn.Parameter:
    gen = torch.Generator().manual_seed(0)
    return torch.nn.Parameter((torch.randn(n, generator=gen) * 0.02).to(dtype))


def _grads(steps: int, n: int = 1000) -> list[torch.Tensor]:  # bf16-valued, as a bf16 backward gives them
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(n, generator=gen).bfloat16() for _ in range(steps)]


def _grad(p: torch.nn.Parameter, g: torch.Tensor) -> torch.Tensor:
    """``g`` as a backward pass of ``p`` leaves it: in p's dtype, then cast to its ``grad_dtype``."""
    return g.to(p.dtype).to(getattr(p, "grad_dtype", None) or p.dtype)


def _train(opt: torch.optim.Optimizer, p: torch.nn.Parameter, grads: list[torch.Tensor]) -> None:
    for g in grads:
        p.grad = _grad(p, g)
        opt.step()
        opt.zero_grad(set_to_none=True)


def test_bf16_weights_move_at_an_rl_learning_rate():
    """The hole: plain AdamW on bf16 weights at lr 1e-6 leaves almost every weight where it was."""
    plain, mastered = _weights(torch.bfloat16), _weights(torch.bfloat16)
    start = plain.detach().clone()
    _train(torch.optim.AdamW([plain], lr=1e-6, weight_decay=0.0), plain, _grads(10))
    opt = adamw([mastered], lr=1e-6)
    assert isinstance(opt, MasterWeightAdamW)
    _train(opt, mastered, _grads(10))
    assert (plain != start).float().mean() < 0.05
    assert (opt.state[mastered]["master"] != start.float()).float().mean() > 0.99  # every master moved
    assert mastered.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_master_steps_as_fp32_adamw_and_the_weights_are_its_rounding(dtype):
    ref, low = _weights(torch.float32), _weights(dtype)
    ref.data.copy_(low.detach().float())  # the same starting values
    ref_opt = torch.optim.AdamW([ref], lr=1e-3, weight_decay=0.01)
    opt = adamw([low], lr=1e-3, weight_decay=0.01)
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, (s + 1) / 3)) for o in (ref_opt, opt)]
    for g in _grads(6):
        ref.grad, low.grad = g.float(), _grad(low, g)
        ref_opt.step()
        opt.step()
        for s in scheds:
            s.step()
    master = opt.state[low]["master"]
    assert master.dtype == torch.float32 and opt.state[low]["exp_avg"].dtype == torch.float32
    assert torch.equal(master, ref.detach())
    assert torch.equal(low.detach(), master.to(dtype))


def test_fp32_parameters_get_torch_adamw_and_mixed_ones_step_alike():
    assert type(adamw([_weights(torch.float32)], lr=1e-3)) is torch.optim.AdamW
    f32, low = _weights(torch.float32, 8), _weights(torch.bfloat16, 8)
    opt = adamw([f32, low], lr=1e-3)
    f32.grad, low.grad = torch.ones(8), _grad(low, torch.ones(8))
    opt.step()
    assert "master" not in opt.state[f32] and opt.state[f32]["exp_avg"].dtype == torch.float32
    assert low.dtype == torch.bfloat16 and low.grad.dtype == torch.float32  # the model's weights stay bf16


def test_gradients_of_bf16_weights_accumulate_in_fp32():
    """Two micro-batches' gradients, 1 and ~0.001: a bf16 sum is 1 (bf16's spacing at 1 is 2^-7), the
    fp32 one keeps the second."""
    p = torch.nn.Parameter(torch.zeros(1, dtype=torch.bfloat16))
    adamw([p], lr=1e-3)
    small = torch.tensor([0.001], dtype=torch.bfloat16)
    for scale in (torch.ones(1, dtype=torch.bfloat16), small):
        (p * scale).sum().backward()
    assert p.grad.dtype == torch.float32 and p.grad.item() == 1.0 + small.float().item()


def test_a_saved_state_resumes_exactly():
    """Through torch.save / torch.load(weights_only=True), as train.checkpoint saves it: the loaded
    masters and moments stay fp32, and two more steps equal an uninterrupted run's."""
    grads = _grads(5)
    p = _weights(torch.bfloat16)
    opt = adamw([p], lr=1e-4)
    _train(opt, p, grads[:3])
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    again = torch.nn.Parameter(p.detach().clone())  # the model file: the bf16 weights
    resumed = adamw([again], lr=1e-4)
    resumed.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    assert all(resumed.state[again][k].dtype == torch.float32 for k in ("master", "exp_avg", "exp_avg_sq"))
    assert again.dtype == torch.bfloat16
    _train(opt, p, grads[3:])
    _train(resumed, again, grads[3:])
    assert torch.equal(resumed.state[again]["master"], opt.state[p]["master"]) and torch.equal(again, p)
