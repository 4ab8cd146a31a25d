"""The forward passes of ``FastSampler``: transformers' own (any causal LM), or a lean one for the
Llama family (Llama, Qwen2, Mistral with default RoPE) that reads the same parameters.

Why the lean one: at the sizes posttrain tests and quickstarts with (hidden 128, 2 layers), a decode
step of transformers' forward spends more time in Python -- mask construction, output dataclasses,
hooks, the cache object -- than in its matrix products. ``LeanForward`` runs the same math (RMSNorm
in fp32, rotary embedding with the model's own ``inv_freq``, grouped-query SDPA, SiLU-gated MLP)
directly on the module's parameters (no copy: it always sees the trainer's current weights), with a
preallocated KV cache that grows by doubling. Equal to transformers' forward within float rounding:
the sampler conformance and speculation tests run on it.

``make_forward(model)`` picks it when the model is of that family and nothing in its config departs
from what it implements (rope scaling, sliding windows, logit soft-capping, ...); otherwise the
transformers forward (``HFForward``).
"""

from __future__ import annotations

import inspect
import math
import sys
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.nn import functional as F

LEAN_TYPES = ("llama", "qwen2", "mistral")


class HFForward:
    """transformers' forward with a ``DynamicCache``."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        # transformers >= 5.2x names the KV cache argument ``cache`` (``past_key_values`` is deprecated)
        self.cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self.cache: Any = None

    def prefill(self, ids: Tensor, mask: Tensor, positions: Tensor) -> Tensor:  # -> (U, V) last-position logits
        from transformers import DynamicCache

        self.cache = DynamicCache()
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1, **{self.cache_kw: self.cache})
        return out.logits[:, -1]

    def select(self, rows: Tensor) -> None:
        self.cache.batch_select_indices(rows)

    def step(self, fed: Tensor, mask: Tensor, positions: Tensor) -> Tensor:  # -> (B, K, V)
        out = self.model(input_ids=fed, attention_mask=mask, position_ids=positions, use_cache=True,
                         **{self.cache_kw: self.cache})
        return out.logits


class LeanForward:
    """The Llama family's forward on the model's own parameters (module docstring)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        body = model.model
        self.layers, self.embed, self.norm, self.head = body.layers, body.embed_tokens, body.norm, model.lm_head
        self.rotary = body.rotary_emb
        self.plan = _fused_plan(self.layers)
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []
        self.length = 0

    def _rope(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:  # (B, 1, K, D) each
        freqs = positions[..., None].float() * self.rotary.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        scale = self.rotary.attention_scaling
        return (emb.cos() * scale).to(dtype)[:, None], (emb.sin() * scale).to(dtype)[:, None]

    @staticmethod
    def _rms(x: Tensor, norm: torch.nn.Module) -> Tensor:
        # transformers' LlamaRMSNorm: normalized in fp32, cast back, then scaled
        return norm.weight * F.rms_norm(x.float(), (x.shape[-1],), eps=norm.variance_epsilon).to(x.dtype)

    @staticmethod
    def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def _run(self, ids: Tensor, positions: Tensor, attn: Tensor) -> Tensor:  # -> (B, K, H) hidden
        b, k = ids.shape
        start = self.length
        self._reserve(b, start + k, self.embed.weight)

        def cache(i: int, kk: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
            self.keys[i][:, :, start : start + k] = kk
            self.values[i][:, :, start : start + k] = v
            return self.keys[i][:, :, : start + k], self.values[i][:, :, : start + k]

        h = self._layers(ids, positions, attn, cache)
        self.length = start + k
        return h

    def _layers(self, ids: Tensor, positions: Tensor, attn: Tensor, cache: Any) -> Tensor:
        """Every layer over ``ids`` (B, K); ``cache(i, k, v)`` stores layer i's new keys and values and
        returns the keys and values the queries attend to (``attn`` masks them)."""
        b, k = ids.shape
        h = self.embed(ids)
        cos, sin = self._rope(positions, h.dtype)
        sizes = (self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim)
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            r = self._rms(h, layer.input_layernorm)
            if self.plan is not None:  # one matrix product for q, k and v
                q, kk, v = F.linear(r, self.plan[i].qkv_w, self.plan[i].qkv_b).split(sizes, -1)
            else:
                q, kk, v = a.q_proj(r), a.k_proj(r), a.v_proj(r)
            q = q.reshape(b, k, self.heads, self.head_dim).transpose(1, 2)
            kk = kk.reshape(b, k, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.reshape(b, k, self.kv_heads, self.head_dim).transpose(1, 2)
            q, kk = self._rotate(q, cos, sin), self._rotate(kk, cos, sin)
            keys, values = cache(i, kk, v)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=attn, scale=a.scaling,
                                               enable_gqa=self.kv_heads != self.heads)
            h = h + a.o_proj(o.transpose(1, 2).reshape(b, k, -1))
            m = layer.mlp
            r = self._rms(h, layer.post_attention_layernorm)
            if self.plan is not None:  # one matrix product for the gate and the up projection
                gate, up = F.linear(r, self.plan[i].gate_up_w, self.plan[i].gate_up_b).chunk(2, -1)
                h = h + m.down_proj(F.silu(gate) * up)
            else:
                h = h + m.down_proj(m.act_fn(m.gate_proj(r)) * m.up_proj(r))
        return self._rms(h, self.norm)

    def _reserve(self, b: int, need: int, like: Tensor) -> None:
        have = self.keys[0].shape[2] if self.keys else 0
        if need <= have:
            return
        size = max(need, 2 * have, 64)
        shape = (b, self.kv_heads, size, self.head_dim)
        for i in range(len(self.layers)):
            k_new = like.new_zeros(shape)
            v_new = like.new_zeros(shape)
            if have:
                k_new[:, :, :have] = self.keys[i]
                v_new[:, :, :have] = self.values[i]
                self.keys[i], self.values[i] = k_new, v_new
            else:
                self.keys.append(k_new)
                self.values.append(v_new)

    def prefill(self, ids: Tensor, mask: Tensor, positions: Tensor) -> Tensor:
        self.keys, self.values, self.length = [], [], 0
        p = ids.shape[1]
        causal = torch.ones(p, p, dtype=torch.bool, device=ids.device).tril()
        attn = causal[None, None] & (mask > 0)[:, None, None, :]
        attn = attn | torch.eye(p, dtype=torch.bool, device=ids.device)[None, None]  # padding sees itself
        h = self._run(ids, positions, attn)
        return self.head(h[:, -1])

    def select(self, rows: Tensor) -> None:
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]

    def step(self, fed: Tensor, mask: Tensor, positions: Tensor) -> Tensor:
        k = fed.shape[1]
        t = mask.shape[1]  # == self.length + k
        block = torch.ones(k, k, dtype=torch.bool, device=fed.device).tril()
        attn = (mask > 0)[:, None, None, :].expand(-1, 1, k, -1).clone()
        attn[:, :, :, t - k :] &= block
        return self.head(self._run(fed, positions, attn))


    def static_step(self, capacity: int, mask: Tensor, *, graph: bool) -> StaticStep:
        """Decode steps of one token per row from here on, with every shape fixed (``StaticStep``)."""
        return StaticStep(self, capacity, mask, graph=graph)


class StaticStep:
    """Decode steps of one token per row, every shape fixed: the KV cache reserved for ``capacity``
    positions (doubled when they are all written, the graph captured again: a long completion costs
    a few captures and at most twice the attention it needs, never a cache sized for
    ``max_new_tokens`` up front), attention over all of it with the positions not yet written masked out,
    the new keys and values written at a position held in a device tensor. On CUDA (``graph``) the
    step is captured once as a CUDA graph and replayed: at the sizes posttrain samples with, a decode
    step of the eager forward is mostly the launch overhead of its ~20 kernels per layer (on the
    H200, FastSampler's 120M Qwen2 at batch 64 ran at ~11 ms a step with the GPU mostly idle, its
    process's CPU busy the whole time). Elsewhere the same step runs eagerly (tests compare it with
    ``LeanForward.step``). Rows never leave a static batch: a finished row is computed and ignored.
    The graph reads the weights where they are, so it always sees the trainer's current values; a
    capture that fails (an operation CUDA graphs cannot hold) falls back to the eager static step.

    ``mask``: (B, T) 1 where the prefilled cache holds a real token, T = the forward's length now."""

    def __init__(self, fwd: LeanForward, capacity: int, mask: Tensor, *, graph: bool) -> None:
        self.fwd, self.graph = fwd, graph
        b, t = mask.shape
        device = fwd.embed.weight.device
        self.valid = torch.zeros(b, 0, dtype=torch.bool, device=device)  # (B, L) attendable
        self._reserve(capacity)
        self.valid[:, :t] = mask > 0
        self.ids = torch.zeros(b, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(b, 1, dtype=torch.long, device=device)
        self.where = torch.zeros(1, dtype=torch.long, device=device)  # the cache position written
        self._graph: Any = None
        self._out: Tensor | None = None

    def _reserve(self, capacity: int) -> None:
        """The cache and the attention mask hold ``capacity`` positions (or more); a graph captured
        on the smaller ones is dropped, to be captured again."""
        f, (b, have) = self.fwd, self.valid.shape
        f._reserve(b, capacity, f.embed.weight)
        size = f.keys[0].shape[2]
        if size != have:
            valid = self.valid.new_zeros(b, size)
            valid[:, :have] = self.valid
            self.valid, self._graph, self._out = valid, None, None
        self.capacity = size

    def __call__(self, tokens: Tensor, positions: Tensor) -> Tensor:  # (B,), (B,) -> (B, V) logits
        f = self.fwd
        if f.length >= self.capacity:
            self._reserve(2 * self.capacity)
        self.ids.copy_(tokens[:, None])
        self.pos.copy_(positions[:, None])
        self.where.fill_(f.length)
        self.valid[:, f.length] = True
        if self.graph and self._graph is None:
            self._capture()
        if self._graph is not None:
            self._graph.replay()
            out = self._out
        else:
            out = self._compute()
        f.length += 1
        return out.clone()

    def _compute(self) -> Tensor:
        f = self.fwd

        def cache(i: int, kk: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
            f.keys[i].index_copy_(2, self.where, kk)
            f.values[i].index_copy_(2, self.where, v)
            return f.keys[i], f.values[i]

        return f.head(f._layers(self.ids, self.pos, self.valid[:, None, None, :], cache)[:, -1])

    def _capture(self) -> None:
        """Warm up on a side stream (the inputs are this step's: what it writes, the replay writes
        again), then capture. A failure leaves ``_graph`` None: the eager static step from then on."""
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self._compute()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: a training step may run on another thread meanwhile (rl.max_staleness > 0)
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self._out = self._compute()
            self._graph = graph
        except Exception as e:  # noqa: BLE001 -- any failure to capture costs speed, never the batch
            print(f"posttrain: CUDA graph capture of the decode step failed ({e}); decoding eagerly",
                  file=sys.stderr)
            self.graph = False


FUSE_MAX_BYTES = 1 << 30
"""The fused q/k/v and gate/up matrices are copies of the weights, made once per ``generate`` batch
(so they always hold the trainer's current weights); above this size the projections run one by one."""


class _Fused(NamedTuple):
    qkv_w: Tensor  # (q + k + v outputs, hidden)
    qkv_b: Tensor | None
    gate_up_w: Tensor  # (2 x intermediate, hidden)
    gate_up_b: Tensor | None


def _fused_plan(layers: Any) -> list[_Fused] | None:
    """Each layer's q/k/v and gate/up weights concatenated, so a decode step runs 2 matrix products
    where it ran 5 (at the sizes posttrain samples with, a step's cost is mostly per-operation
    overhead). None (project one by one) when a projection is not a plain ``nn.Linear`` (a LoRA or
    quantized wrapper computes more than its weight) or the copies would exceed ``FUSE_MAX_BYTES``."""
    projections = [(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj,
                    layer.mlp.gate_proj, layer.mlp.up_proj) for layer in layers]
    mods = [m for group in projections for m in group]
    if not all(type(m) is torch.nn.Linear for m in mods):
        return None
    if sum(m.weight.numel() * m.weight.element_size() for m in mods) > FUSE_MAX_BYTES:
        return None

    def cat_bias(ms: tuple[torch.nn.Linear, ...]) -> Tensor | None:
        if all(m.bias is None for m in ms):
            return None
        return torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in ms])

    with torch.no_grad():
        return [_Fused(torch.cat([q.weight, k.weight, v.weight]), cat_bias((q, k, v)),
                       torch.cat([g.weight, u.weight]), cat_bias((g, u)))
                for q, k, v, g, u in projections]


def make_forward(model: torch.nn.Module) -> HFForward | LeanForward:
    """``LeanForward`` where it reproduces the model exactly (module docstring), else ``HFForward``."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in LEAN_TYPES or not _plain(model, cfg):
        return HFForward(model)
    return LeanForward(model)


def _plain(model: torch.nn.Module, cfg: Any) -> bool:
    """Nothing the lean forward leaves out: default RoPE, no sliding window, no soft-capping, SiLU, an
    unwrapped Linear head, transformers' own module layout."""
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    body = getattr(model, "model", None)
    layers = getattr(body, "layers", None)
    if not layers or not isinstance(getattr(model, "lm_head", None), torch.nn.Linear) or not hasattr(body, "rotary_emb"):
        return False
    window = getattr(cfg, "sliding_window", None)
    no_window = not getattr(cfg, "use_sliding_window", False) and (cfg.model_type == "qwen2" or not window)
    first = layers[0]
    return (
        rope.get("rope_type", "default") == "default" and no_window
        and getattr(cfg, "hidden_act", "silu") == "silu"
        and getattr(cfg, "final_logit_softcapping", None) is None
        and all(hasattr(first.self_attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling"))
        and all(hasattr(first.mlp, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn"))
        and math.isfinite(float(body.rotary_emb.attention_scaling))
    )
