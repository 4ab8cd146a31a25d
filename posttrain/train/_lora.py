"""LoRA (peft) as an option of every trainer: ``LoraSpec``, ``lora_target_modules``, ``apply_lora``.

With adapters the base weights stay frozen, and the base (``model.disable_adapter()``) doubles as
the reference policy of DPO and GRPO without a second copy of the weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from torch import nn

from posttrain.config import PositiveFloat, PositiveInt, Range
from posttrain.errors import ConfigError


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters (peft) instead of full fine-tuning; the frozen base doubles as the reference."""

    r: PositiveInt = 8
    """Rank of the adapter matrices."""
    alpha: PositiveFloat = 16.0
    """Scaling: the update is (alpha / r) * B A."""
    dropout: Annotated[float, Range(ge=0, lt=1)] = 0.0
    """Dropout on the adapter input."""
    target_modules: tuple[str, ...] | None = None
    """Names of the Linear modules that get adapters; null = the architecture's default (the
    attention projections q/k/v/o_proj where the model has them, else peft's table: GPT-2 c_attn)."""

    def __post_init__(self) -> None:
        if self.target_modules == ():
            raise ConfigError("target_modules: expected at least one module name, or null for the architecture's default")
        if self.r < 1 or self.alpha <= 0 or not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"lora: need r >= 1, alpha > 0, 0 <= dropout < 1; got {self}")


ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def lora_target_modules(model: nn.Module, spec: LoraSpec, *, key: str = "lora.target_modules") -> list[str]:
    """The module names LoRA wraps in ``model``: ``spec.target_modules``, or the architecture's default.

    The default is the attention projections where the model has them (Llama, Qwen, Mistral), else
    peft's table for ``model.config.model_type`` (GPT-2: ``c_attn``). A name the model lacks is a
    ``ConfigError`` naming ``key`` and the module names it has (peft would match nothing, or fail
    with a message about regexes). Names match as peft matches them: a module's name or a suffix
    of its dotted path (``self_attn.q_proj``).
    """
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS
    from transformers.pytorch_utils import Conv1D

    paths = [n for n, m in model.named_modules() if isinstance(m, nn.Linear | nn.Embedding | Conv1D)]
    have = sorted({p.rsplit(".", 1)[-1] for p in paths})
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if spec.target_modules is None:
        wanted = [m for m in ATTENTION_PROJECTIONS if m in have] or list(PEFT_DEFAULTS.get(model_type) or [])
        if not wanted or not set(wanted) <= set(have):
            raise ConfigError(f"{key}: no default for model type {model_type!r}; "
                              f"name some of the modules LoRA can wrap: {', '.join(have)}")
        return wanted
    for name in spec.target_modules:
        if not any(p == name or p.endswith("." + name) for p in paths):
            raise ConfigError(f"{key}: {type(model).__name__} ({model_type}) has no module {name!r}; "
                              f"the modules LoRA can wrap are {', '.join(have)}")
    return list(spec.target_modules)


def apply_lora(model: nn.Module, spec: LoraSpec, *, task_type: str = "CAUSAL_LM") -> nn.Module:
    """Wrap ``model`` with peft LoRA adapters; only the adapters (and, for SEQ_CLS, the head) train.

    ``model.disable_adapter()`` (a context manager) then gives the base model: the reference policy
    of DPO/GRPO without a second copy of the weights.
    """
    from peft import LoraConfig, get_peft_model
    from transformers.pytorch_utils import Conv1D

    targets = lora_target_modules(model, spec)
    config = LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=targets,
        task_type=task_type,
        # GPT-2's Conv1D stores its weight transposed (peft would otherwise warn and set it itself)
        fan_in_fan_out=any(isinstance(m, Conv1D) and n.rsplit(".", 1)[-1] in targets for n, m in model.named_modules()),
    )
    try:
        return get_peft_model(model, config)
    except ValueError as e:
        raise ConfigError(f"lora.target_modules {targets}: {e}") from e
