"""The optimizer of every trainer: AdamW, with fp32 master weights for parameters held in bf16 or fp16.

Why: ``model.dtype: bfloat16`` holds the weights in bf16, and a bf16 number cannot move by less than
half its spacing (2^-8 of its magnitude). AdamW's steps are about ``lr`` in size, so at the learning
rates RL uses (1e-6) almost every weight of a bf16 model would never change: of a tensor of
0.02-scale weights, 1.6% moved in 10 AdamW steps at lr 1e-6 in bf16, all of them in fp32
(tests/train/test_optim.py). What verl (FSDP mixed precision) and TRL (``bf16=True``: autocast over
fp32 weights) give their users is fp32 weights under bf16 compute; this is that for the optimizer.

``MasterWeightAdamW`` keeps an fp32 copy of each low-precision parameter in its state (``master``),
takes torch's own AdamW step on that copy with the gradient in fp32 and fp32 moments, and rounds the
result into the model's parameter. The forward and backward passes, the samplers, the weights pushed
to an engine and the checkpoints' model files see the bf16 model as before; the optimizer state
(saved with every checkpoint) holds the fp32 weights, so a resume continues exactly. The gradients
of those parameters are fp32 (torch's ``grad_dtype``, torch >= 2.9: backward casts each one and
accumulates the micro-batches in fp32; on an older torch they stay in the parameters' dtype).

Sharded (DTensor) bf16 parameters are refused here: a data-parallel run in bf16 shards fp32 weights
instead and computes in bf16 through FSDP2's mixed precision (``_dist.shard``), and its checkpoints
carry the fp32 shards as these masters (``_dist.save_state``), so either kind resumes exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

LOW_PRECISION = (torch.bfloat16, torch.float16)


def adamw(params: Iterable[nn.Parameter], *, lr: float, weight_decay: float = 0.0) -> torch.optim.AdamW:
    """``torch.optim.AdamW``, or ``MasterWeightAdamW`` when some parameter is bf16 or fp16."""
    params = list(params)
    low = [p for p in params if p.dtype in LOW_PRECISION]
    if any(type(p.data) is not torch.Tensor for p in low):
        raise ValueError("adamw: sharded (DTensor) bf16/fp16 parameters have no fp32 master weights here; "
                         "shard fp32 weights with a bf16 compute dtype (_dist.shard)")
    if low:
        return MasterWeightAdamW(params, lr=lr, weight_decay=weight_decay)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


class MasterWeightAdamW(torch.optim.AdamW):
    """AdamW stepping an fp32 master copy of each bf16/fp16 parameter (module docstring); fp32
    parameters are stepped as ``torch.optim.AdamW`` steps them. Its ``state_dict`` holds the masters
    (``state[i]["master"]``) and fp32 moments, and ``load_state_dict`` keeps them fp32.

    >>> # optimizer = MasterWeightAdamW(model.parameters(), lr=1e-6)   # a bf16 model
    """

    def __init__(self, params: Iterable[nn.Parameter], **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        for group in self.param_groups:
            for p in group["params"]:
                if p.dtype in LOW_PRECISION and hasattr(p, "grad_dtype"):  # torch >= 2.9
                    p.grad_dtype = torch.float32  # backward casts each gradient, then accumulates in fp32

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if closure is not None:
            raise ValueError("MasterWeightAdamW.step takes no closure")
        with self._on_masters(stepping=True) as masters:
            loss = super().step()
        for p, master in masters:
            self.state[p]["master"] = master  # after the first step: AdamW fills an empty state itself
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # torch casts a loaded state to its parameter's dtype: cast to fp32 while the masters stand in
        with self._on_masters(stepping=False):
            super().load_state_dict(state_dict)

    @contextmanager
    def _on_masters(self, *, stepping: bool) -> Iterator[list[tuple[nn.Parameter, torch.Tensor]]]:
        """Each low-precision parameter's data is its fp32 master while inside (``stepping``: those
        with a gradient, the gradient in fp32, and the master rounded into the parameter on the way
        out; else every one, a stand-in nothing is written back from)."""
        swapped: list[tuple[nn.Parameter, torch.Tensor, torch.Tensor | None, torch.Tensor]] = []
        try:
            for group in self.param_groups:
                for p in group["params"]:
                    if p.dtype not in LOW_PRECISION or (stepping and p.grad is None):
                        continue
                    master = self.state[p].get("master") if stepping else None
                    if master is None:
                        master = p.detach().float()
                    grad = p.grad
                    swapped.append((p, p.data, grad, master))
                    p.grad = None
                    p.data = master
                    if stepping and grad is not None:
                        p.grad = grad.float()
            yield [(p, master) for p, _, _, master in swapped]
        finally:
            for p, data, grad, master in reversed(swapped):
                p.grad = None
                if stepping:
                    data.copy_(master)  # round to the parameter's dtype
                p.data = data
                p.grad = grad
