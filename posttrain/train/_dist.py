"""Data-parallel training with ``torch.distributed`` FSDP2 (``fully_shard``): the GRPO update step on
N processes, equal to the one-process step, and checkpoints that resume it exactly.

    torchrun --standalone --nproc_per_node=2 your_script.py     # CPU: gloo; GPUs: nccl, one per rank
    torchrun --nnodes=4 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=HEAD:29500 your_script.py

(``torchrun --master_port=0`` hangs in ``init_process_group`` here: use ``--standalone`` or a
chosen port.) What each rank does:

- ``init()``: the process group (gloo on the CPU, nccl with CUDA), the rank's device;
- ``shard(model)``: ``fully_shard`` on every decoder layer (its parameters become DTensors sharded
  over the ranks, all-gathered for its forward and backward); the embeddings, final norm and LM head
  stay whole on every rank (the update's fused log-prob head reads the LM head's weight outside a
  module forward, where FSDP cannot gather it) and their gradients are all-reduced;
- ``rank_rows(batch)``: this rank's rows of the global batch: the rows in the update's order (one
  group's rows together, ``_step._row_order``), dealt in contiguous, equal chunks (a chunk short of
  rows is padded with a row that has nothing to score, so every rank runs the same collectives);
- ``update(model, optimizer, batch, spec, ...)``: the ``policy_update`` of the *global* batch --
  every micro-batch normalized by the global counts (``count_items`` summed over ranks), gradients
  summed over ranks (each rank backpropagates world x its loss; FSDP2 averages), clipped by the
  global norm, one optimizer step; the metrics are the global ones;
- ``state(model, optimizer)`` / ``load_state(...)``: full (unsharded) model and optimizer state on
  every rank (``torch.distributed.checkpoint.state_dict``), so a checkpoint written by rank 0 with
  ``train.checkpoint`` resumes on any number of ranks.

Equal to one process within floating-point summation order (tests/train/test_dist.py: loss and
updated weights of a GRPO step on 2 gloo ranks against ``policy_update``; exact resume from a
checkpoint between steps).

The RL loop on N ranks (``rl.data_parallel``, ``train_grpo(..., dp=DataParallel(...))``; the ranks
are launched by ``posttrain.cli._ranks``): every rank draws the same tasks (one task sampler, the
same seed, the same observations), samples and verifies its share of them (``DataParallel.share``:
every world-th task), and the groups are gathered (``DataParallel.gather``) so that every rank holds
the whole step, in the task order, and builds the same batch with the same advantages; the update
is ``update`` on ``rank_rows``. Generation reads a whole (unsharded) copy of the weights, loaded
after every update from ``whole_state`` (a sharded model's forward is a collective, and ranks
generate different lengths). Checkpoints are the one-process layout (``indexed_optim`` /
``named_optim`` convert the optimizer state), with every rank's RNG states.

Not here: tensor or pipeline parallelism, sharded (per-rank) checkpoint files, multi-node launch,
Ray launch.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from posttrain.algo import count_items
from posttrain.train._step import LossSpec, PolicyBatch, _row_order, policy_loss
from posttrain.train.checkpoint import Checkpoint, CheckpointError, set_rng_state

T = TypeVar("T")


@dataclass(frozen=True)
class DataParallel:
    """This process's place among the RL loop's ranks (module docstring): ``rank`` of ``world``."""

    rank: int
    world: int

    @property
    def writes(self) -> bool:
        """Whether this rank writes the run's files (metrics, trajectories, checkpoints): rank 0."""
        return self.rank == 0

    def share(self, n: int) -> list[int]:
        """The indices of ``n`` items this rank works on: every ``world``-th, from ``rank``."""
        return list(range(self.rank, n, self.world))

    def gather(self, mine: Sequence[T], n: int) -> list[T]:
        """Every rank's ``share(n)`` results (``mine``, in its share's order), as one list of ``n``
        in index order, on every rank (a collective: every rank calls it, in the same order)."""
        out: list[Any] = [None] * n
        for rank, part in enumerate(self.every(list(mine))):
            for i, item in zip(range(rank, n, self.world), part, strict=True):
                out[i] = item
        return out

    def every(self, value: T) -> list[T]:
        """``value`` of every rank, in rank order, on every rank (a collective)."""
        parts: list[Any] = [None] * self.world
        dist.all_gather_object(parts, value)
        return parts


def init() -> tuple[int, int, torch.device]:
    """Join the process group torchrun set up (env ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...).
    Returns (rank, world size, this rank's device)."""
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        return rank, world, torch.device("cuda", local)
    return rank, world, torch.device("cpu")


def shard(model: nn.Module, *, compute_dtype: torch.dtype | None = None) -> nn.Module:
    """``fully_shard`` every decoder layer (the modules named in the model's ``_no_split_modules``,
    else ``model.model.layers``); the rest stays whole (``_replicated``). ``compute_dtype`` (bf16):
    the model's weights are made fp32 first, and FSDP2 gathers each layer's weights in that dtype for
    its forward and backward and reduces its gradients in fp32 (``MixedPrecisionPolicy``): the shards
    are the fp32 master weights the optimizer steps (the one-process run keeps them in
    ``train._optim.MasterWeightAdamW``); the whole parts compute in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names] or list(_decoder_layers(model))
    policy = MixedPrecisionPolicy()
    if compute_dtype is not None:
        model.float()
        policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    return model


def _replicated(model: nn.Module) -> list[nn.Parameter]:
    """The parameters outside the sharded layers (embeddings, final norm, LM head): the update's
    fused log-prob head reads the LM head's weight outside any module's forward, where FSDP could
    not gather it, so these stay whole on every rank and their gradients are all-reduced."""
    from torch.distributed.tensor import DTensor

    seen: dict[int, nn.Parameter] = {}
    for p in model.parameters():
        if not isinstance(p, DTensor) and p.requires_grad:
            seen.setdefault(id(p), p)
    return list(seen.values())


def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    body = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    return list(getattr(body, "layers", []) or [])


def rank_rows(batch: PolicyBatch, rank: int, world: int) -> PolicyBatch:
    """This rank's rows of the global ``batch`` (module docstring), padded to the common size."""
    order = _row_order(batch)
    per = math.ceil(len(order) / world)
    mine = order[rank * per : (rank + 1) * per]

    def take(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None:
            return None
        out = t[mine]
        if len(mine) < per:  # padding rows: a copy of row 0 with nothing to score
            pad = t[order[:1]].repeat(per - len(mine), *([1] * (t.dim() - 1)))
            out = torch.cat([out, pad])
        return out

    rows = dataclasses.replace(batch, **{f.name: take(getattr(batch, f.name)) for f in dataclasses.fields(batch)})
    if len(mine) < per:
        loss_mask = rows.loss_mask.clone()
        loss_mask[len(mine) :] = 0.0
        group = rows.group.clone() if rows.group is not None else None
        if group is not None:
            group[len(mine) :] = -1 - torch.arange(per - len(mine), device=group.device)  # alone
        rows = dataclasses.replace(rows, loss_mask=loss_mask, group=group)
    return rows


def _all_sum(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    local: PolicyBatch,
    spec: LossSpec,
    *,
    micro_batch_size: int,
    max_grad_norm: float,
) -> dict[str, float]:
    """One optimizer step of the global batch whose rows on this rank are ``local`` (``rank_rows``).

    Returns the global metrics, as ``policy_update`` names them: ``loss`` (the global batch's loss),
    token-weighted ``clip_frac``, ``approx_kl``, ``entropy`` (and ``kl``), ``ratio_max``,
    ``grad_norm`` (before clipping), ``tokens``, ``skipped``."""
    device = local.input_ids.device
    model.train()
    n_tok, n_items = _all_sum([float(local.loss_mask.sum()), float(count_items(local.loss_mask, spec.agg))], device)
    optimizer.zero_grad(set_to_none=True)
    totals: dict[str, float] = {}
    loss_sum = ratio_max = 0.0
    order = torch.arange(local.input_ids.shape[0], device=device)  # already in the update's order
    for start in range(0, len(order), micro_batch_size):  # the same count on every rank: same collectives
        sl = order[start : start + micro_batch_size]
        w = float(local.loss_mask[sl].sum())
        loss, stats = policy_loss(model, local, spec, rows=sl, num_items=max(n_items, 1e-12))
        # x world: FSDP averages the layers' gradients over ranks (a divide factor of 1 needs
        # PREMUL_SUM, which gloo lacks), and the global gradient is the sum of the ranks' own
        (loss * dist.get_world_size()).backward()
        loss_sum += float(loss.detach())
        ratio_max = max(ratio_max, stats.pop("ratio_max", 0.0))
        for k, v in stats.items():
            totals[k] = totals.get(k, 0.0) + (v * w if w else 0.0)
    keys = sorted(totals)
    summed = _all_sum([loss_sum, *(totals[k] for k in keys)], device)
    most = torch.tensor([ratio_max], dtype=torch.float64, device=device)
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    out = {k: v / n_tok for k, v in zip(keys, summed[1:], strict=True)} if n_tok else {}
    if n_tok == 0.0:
        optimizer.zero_grad(set_to_none=True)
        return {**out, "loss": 0.0, "grad_norm": 0.0, "tokens": 0.0, "skipped": 1.0}
    for p in _replicated(model):  # averaged over ranks, as FSDP averages the sharded layers'
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad.div_(dist.get_world_size())
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    grad_norm = _clip_grad_norm(params, max_grad_norm, device)
    if math.isfinite(grad_norm):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {**out, "loss": summed[0], "ratio_max": float(most), "grad_norm": grad_norm, "tokens": n_tok,
            "skipped": 0.0 if math.isfinite(grad_norm) else 1.0}


def _clip_grad_norm(params: list[nn.Parameter], max_norm: float, device: torch.device) -> float:
    """``torch.nn.utils.clip_grad_norm_`` over sharded (DTensor) and whole gradients together: the
    global L2 norm (shards' squares summed over ranks, whole ones counted once), then the same
    scaling, ``min(1, max_norm / (norm + 1e-6))``. Returns the norm before clipping."""
    from torch.distributed.tensor import DTensor

    sharded = sum(float(p.grad.to_local().double().pow(2).sum()) for p in params if isinstance(p.grad, DTensor))
    whole = sum(float(p.grad.double().pow(2).sum()) for p in params if not isinstance(p.grad, DTensor))
    [sharded] = _all_sum([sharded], device)
    norm = math.sqrt(sharded + whole)
    coef = min(1.0, max_norm / (norm + 1e-6))
    if coef < 1.0:
        for p in params:
            p.grad.mul_(coef)
    return norm


def state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """The full (unsharded, CPU) model and optimizer state dicts, gathered on every rank."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def whole_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's full state dict, a copy: the DTensor shards of a ``shard``-ed model gathered (a
    collective: every rank calls it), a plain model's tensors cloned."""
    from torch.distributed.tensor import DTensor

    if not any(isinstance(p, DTensor) for p in model.parameters()):
        return {k: v.detach().clone() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def indexed_optim(state: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """A full optimizer state keyed by parameter name (``state``'s) -> as ``optimizer.state_dict()``
    of one process keys it: by the parameter's index, ``names`` being the model's parameter names
    in ``model.parameters()`` order. A checkpoint of N ranks then resumes in one process, and back."""
    index = {name: i for i, name in enumerate(names)}
    return {"state": {index[k]: v for k, v in state["state"].items()},
            "param_groups": [{**g, "params": [index[k] for k in g["params"]]} for g in state["param_groups"]]}


def named_optim(state: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The inverse of ``indexed_optim``: a one-process optimizer state keyed by parameter name."""
    return {"state": {names[int(k)]: v for k, v in state["state"].items()},
            "param_groups": [{**g, "params": [names[int(k)] for k in g["params"]]} for g in state["param_groups"]]}


def load_state(model: nn.Module, optimizer: torch.optim.Optimizer, model_state: Mapping[str, Any],
               optim_state: Mapping[str, Any]) -> None:
    """Load full state dicts (``state``) into a sharded model and its optimizer, on every rank."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    set_state_dict(model, optimizer, model_state_dict=dict(model_state), optim_state_dict=dict(optim_state),
                   options=StateDictOptions(full_state_dict=True))


def save_state(model: nn.Module, optimizer: torch.optim.Optimizer, dp: DataParallel, *,
               masters: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a one-process checkpoint holds, from a sharded model (a collective): the full model state
    and the optimizer state keyed as one process keys it (``indexed_optim``); complete on rank 0.
    ``masters`` (a bf16 run, ``shard(compute_dtype=...)``): the fp32 weights of every stepped
    parameter go into its optimizer state as ``master``, where ``MasterWeightAdamW`` keeps them, so
    the checkpoint's bf16 model file loses nothing a resume needs, in one process or N."""
    model_state, optim_state = state(model, optimizer)
    if not dp.writes:
        return {}, {}
    names = [name for name, _ in model.named_parameters()]
    if masters:  # the gathered fp32 tensors themselves (nothing writes to them: loaded into a copy, saved)
        for name, st in optim_state["state"].items():
            st["master"] = model_state[name]
    return model_state, indexed_optim(optim_state, names)


def restore(ckpt: Checkpoint, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, dp: DataParallel) -> None:
    """A checkpoint into a sharded model whose weights were loaded before sharding
    (``checkpoint.load_weights``): the optimizer state (one process's keys, ``named_optim``), the LR
    schedule, and this rank's RNG states (rank 0's, for a checkpoint one process wrote)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    saved = torch.load(ckpt.path / "state.pt", map_location="cpu", weights_only=True)
    if saved["optimizer"] is None or saved["scheduler"] is None:
        raise CheckpointError(f"{ckpt.path} was saved without an optimizer or scheduler state")
    names = [name for name, _ in model.named_parameters()]
    optim = named_optim(saved["optimizer"], names)
    masters = {name: st.pop("master") for name, st in optim["state"].items() if "master" in st}
    if masters:  # a bf16 run's fp32 weights (``save_state``): the shards continue from them, not from the bf16 file
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(model, masters, options=StateDictOptions(full_state_dict=True, strict=False))
    set_optimizer_state_dict(model, optimizer, optim_state_dict=optim, options=StateDictOptions(full_state_dict=True))
    scheduler.load_state_dict(saved["scheduler"])
    ranks = saved["rng"].get("ranks")
    if ranks is not None and len(ranks) != dp.world:
        raise CheckpointError(f"{ckpt.path} was written by {len(ranks)} ranks; this run has {dp.world} "
                              f"(rl.data_parallel must stay as the run started)")
    set_rng_state(ranks[dp.rank] if ranks is not None else saved["rng"])
