"""Policy: a transformers causal LM + its tokenizer, with token-exact sampling.

``Policy.generate`` returns, for each prompt, ``n`` completions with the exact token ids sampled
and their log-probabilities under the sampling distribution (softmax(logits / temperature), no
top-k/top-p truncation), so that training can use exactly what was sampled (DESIGN.md,
"token-exact trajectories"). Text is decoded for the verifier; it is never re-tokenized for training.

Not here: vLLM/SGLang backends. The call site (``generate``) is the seam where one would plug in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from posttrain.errors import UserError
from posttrain.types import FinishReason


@dataclass(frozen=True)
class Generation:
    """One sampled completion of one prompt."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    """Sampled tokens, including the EOS token when the model stopped."""
    logprobs: tuple[float, ...]
    """log pi(token) at the sampling temperature, one per completion token."""
    text: str
    """The completion decoded without special tokens."""
    finish_reason: FinishReason


class Policy:
    """A causal LM and its tokenizer. Build with ``load_policy``."""

    def __init__(self, model: torch.nn.Module, tokenizer, *, path: str | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.path = path
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"

    @property
    def eos_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    def encode_prompt(self, prompt: str) -> list[int]:
        """Prompt text -> token ids, with BOS prepended when the tokenizer has one and did not add it."""
        ids = list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        bos = self.tokenizer.bos_token_id
        if bos is not None and (not ids or ids[0] != bos):
            ids = [bos, *ids]
        return ids

    def encode_completion(self, text: str) -> list[int]:
        """Demonstration text -> completion token ids, ending with EOS (for SFT)."""
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return [*ids, self.eos_token_id]

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[str],
        *,
        n: int = 1,
        temperature: float = 1.0,
        max_new_tokens: int = 64,
        seed: int | None = None,
        batch_size: int = 256,
    ) -> list[list[Generation]]:
        """Sample ``n`` completions per prompt. Returns ``out[prompt_index][sample_index]``.

        ``temperature == 0`` means greedy decoding (logprobs are then those of softmax(logits)).
        """
        if temperature < 0:
            raise UserError(f"temperature must be >= 0, got {temperature}")
        if seed is not None:
            torch.manual_seed(seed)
        flat = [self.encode_prompt(p) for p in prompts for _ in range(n)]
        results: list[Generation] = []
        for start in range(0, len(flat), batch_size):
            results.extend(self._generate_batch(flat[start : start + batch_size], temperature, max_new_tokens))
        return [results[i * n : (i + 1) * n] for i in range(len(prompts))]

    def _generate_batch(self, prompt_ids: list[list[int]], temperature: float, max_new_tokens: int) -> list[Generation]:
        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompt_ids)
        input_ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)  # (B, P) left-padded
        attention = torch.zeros_like(input_ids)
        for i, ids in enumerate(prompt_ids):
            input_ids[i, width - len(ids) :] = torch.tensor(ids)
            attention[i, width - len(ids) :] = 1
        device = next(self.model.parameters()).device
        greedy = temperature == 0
        was_training = self.model.training
        self.model.eval()
        out = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            do_sample=not greedy,
            temperature=None if greedy else temperature,
            top_k=0 if not greedy else None,
            top_p=1.0 if not greedy else None,
            max_new_tokens=max_new_tokens,
            eos_token_id=self.eos_token_id,
            pad_token_id=pad,
            return_dict_in_generate=True,
            output_logits=True,
        )
        self.model.train(was_training)
        new = out.sequences[:, width:].cpu()  # (B, L)
        logits = torch.stack(out.logits, dim=1).float().cpu()  # (B, L, V) raw logits
        logp_all = torch.log_softmax(logits / (1.0 if greedy else temperature), dim=-1)
        token_logp = logp_all.gather(-1, new.unsqueeze(-1)).squeeze(-1)  # (B, L)
        gens = []
        for i, ids in enumerate(prompt_ids):
            row = new[i].tolist()
            if self.eos_token_id in row:
                cut, reason = row.index(self.eos_token_id) + 1, "stop"
            else:
                cut, reason = len(row), "length"
            comp = tuple(row[:cut])
            gens.append(
                Generation(
                    prompt_ids=tuple(ids),
                    completion_ids=comp,
                    logprobs=tuple(token_logp[i, :cut].tolist()),
                    text=self.tokenizer.decode(list(comp), skip_special_tokens=True),
                    finish_reason=reason,
                )
            )
        return gens

    def save(self, path: str | Path) -> Path:
        """save_pretrained (safetensors) of model and tokenizer."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path, safe_serialization=True)
        self.tokenizer.save_pretrained(path)
        return path


def load_policy(name_or_path: str | Path, *, device: str = "cpu", dtype: torch.dtype = torch.float32) -> Policy:
    """Load a causal LM and tokenizer with ``from_pretrained`` (a local path or a hub name).

    >>> # policy = load_policy("runs/quickstart/checkpoints/rl")
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = str(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype)
    except OSError as e:
        raise UserError(f"cannot load model {where!r}: {e.__class__.__name__}: {str(e).splitlines()[0]}") from e
    model.to(device)
    return Policy(model, tokenizer, path=where)
