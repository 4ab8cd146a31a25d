"""The sampling seam without torch: ``SamplingParams`` (how to sample, checked on construction) and the
``Sampler`` protocol (``_sampler.py`` has the backends and the full contract). Apart so that what only
names the seam (the episode runner, a scripted agent's evaluation) never imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from posttrain.errors import UserError
from posttrain.strict_json import finite_number
from posttrain.types import Generation

MIN_TEMPERATURE = 1e-5
"""The smallest temperature above 0. Below it ``logits / temperature`` can overflow fp32 (1e-38: NaN
logprobs from ``FastSampler``, an error from ``LocalSampler``), and vLLM samples greedily (its
``_SAMPLING_EPS``), so backends would disagree; 0 is greedy decoding."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. Checked on construction: a bad value is a ``UserError`` naming the field.

    >>> SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=32, stop=("\\n\\n",)).top_k
    0
    """

    temperature: float = 1.0
    """0 means greedy decoding; else at least ``MIN_TEMPERATURE``."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches ``top_p``; 1 = off."""
    top_k: int = 0
    """Keep the ``top_k`` most likely tokens; 0 = off."""
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()
    """Stop strings: sampling of a row stops at the first token after which its decoded completion
    contains one of them, the decoding being ``tokenizer.decode(completion_ids, skip_special_tokens=True)``
    (``Generation.text``): special tokens between a stop string's parts are skipped and do not hide it,
    a stop string may span tokens or end inside one, a character whose bytes span tokens counts once
    complete, and the prompt is no part of it (a stop string begun in the prompt does not stop a row).
    The completion keeps every id through that token, so ``text`` contains the stop string and may run
    past it. ``LocalSampler``, ``FastSampler`` and ``VllmSampler`` follow this rule (``_sampler.StopStrings``:
    how, and the tokenizers it does not cover). vLLM itself matches on its decoding after the prompt's
    tokens, which differs where that context changes the completion's first characters (a
    sentencepiece leading space, a character begun in the prompt): ``VllmSampler`` checks each row
    again, cutting it or resuming it (``_vllm.py``); ``EndpointSampler`` does the same on the
    server's ids when given the served model's tokenizer (``posttrain eval --endpoint`` gives it
    ``--tokenizer``'s), and reports a server's stops as they come without one."""
    seed: int | None = None
    """Seeds torch's global generator once per call; ``None`` continues its stream."""

    def __post_init__(self) -> None:
        def bad(name: str, expected: str) -> UserError:
            return UserError(f"sampling: {name} must be {expected}, got {getattr(self, name)!r}")

        if not finite_number(self.temperature) or self.temperature < 0 or 0 < self.temperature < MIN_TEMPERATURE:
            raise bad("temperature", f"0 (greedy) or a number >= {MIN_TEMPERATURE:g}")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise bad("top_p", "a number in (0, 1]")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise bad("top_k", "an integer >= 0")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise bad("max_new_tokens", "an integer >= 1")
        if not isinstance(self.stop, tuple) or not all(isinstance(s, str) and s for s in self.stop):
            raise bad("stop", "a tuple of non-empty strings")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise bad("seed", "an integer or None")


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


class Sampler(Protocol):
    """Token-level sampling: one ``Generation`` per prompt, in order.

    Sample ``n`` completions of a prompt by repeating its ids ``n`` times.
    """

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]: ...


POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")
"""config.json keys that give a model's number of positions, in the order they are read."""


def context_length(model: object) -> int | None:
    """The positions of a policy's model (its config's ``POSITION_KEYS``, the text model's where the
    model has several), None where it has no such config (an endpoint) or the config does not say."""
    config = getattr(getattr(model, "model", None), "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    for key in POSITION_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
