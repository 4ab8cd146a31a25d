"""The vLLM engine worker: runs in the vLLM environment (``make vllm-env``: .venv-vllm), started by
``posttrain.policy.VllmSampler``, one JSON request per line on stdin, one JSON answer per line on
the original stdout (vLLM's own logs go to stderr).

    .venv-vllm/bin/python posttrain/policy/_vllm_worker.py '{"model": DIR, "max_model_len": 512, ...}'

It imports only the standard library and vLLM (posttrain's own environment is not there). The
engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: 3 s to start instead of 25 s,
and ``collective_rpc`` reaches the model runner directly).

Requests (``op``) and answers:
- ``generate`` {prompts: [[ids]], params: {temperature, top_p, top_k, stop, max_tokens: [n], seeds}} ->
  {outputs: [{ids, logprobs, text, finish_reason, stop_reason}]} (``max_tokens`` and ``seeds``: one
  per prompt; ``VllmSampler`` resumes rows with fewer tokens left): the sampled ids and the logprob of
  each under the sampling distribution (``logprobs_mode="processed_logprobs"``: after temperature,
  top-k and top-p), the EOS token kept as the last id.
- ``reload`` {path} -> {ok}: ``collective_rpc("reload_weights", weights_path=path)`` (the only
  weight update that works on the CPU backend, dependencies.md), then ``reset_prefix_cache()``:
  cached prompt KV of the old weights is never reused.
- ``score`` {ids} -> {logprobs}: log p(ids[t] | ids[<t]) for t >= 1 (``prompt_logprobs``), raw
  logits at temperature 1: what the trainer compares after a reload.
- ``stats`` -> {prefix_queries, prefix_hits}: prompt tokens looked up in the prefix cache and found
  there, since the engine started (a GRPO group's G copies of a prompt: G - 1 of them hit).
- ``reset`` -> {ok}: the prefix cache emptied (a benchmark's repeated call computes its prompts again).
- ``shutdown`` -> {ok}, then exit.
An exception answers {error: "<type>: <message>"} and the worker carries on.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)  # answers; fd 1 becomes stderr for vLLM's logs
    os.dup2(2, 1)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on the CPU backend
    cfg = json.loads(sys.argv[1])
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.platforms import current_platform

    # Prefix sharing: vLLM caches whole KV blocks, and requests of one engine step share the blocks
    # they have in common (a GRPO group's prompt is computed once). The CPU backend's default block of
    # 128 tokens leaves a shorter prompt no whole block to share (measured: 0 hits for 8 copies of a
    # 100-token prompt; 5,376 of 6,400 prompt tokens with blocks of 32), hence 32 there.
    block = {"block_size": 32} if current_platform.is_cpu() else {}
    llm = LLM(model=cfg["model"], dtype=cfg.get("dtype", "float32"), enforce_eager=True,
              max_model_len=cfg["max_model_len"], seed=cfg.get("seed", 0), logprobs_mode="processed_logprobs",
              generation_config="vllm",  # vLLM's neutral defaults, never the checkpoint's sampling defaults
              enable_prefix_caching=True, max_num_batched_tokens=cfg["max_num_batched_tokens"],
              disable_log_stats=False, **block)
    proto.write(json.dumps({"ready": True}) + "\n")

    def generate(req: dict) -> dict:
        p = req["params"]
        params = [SamplingParams(temperature=p["temperature"], top_p=p["top_p"], top_k=p["top_k"] or -1,
                                 max_tokens=n, stop=p["stop"] or None, seed=seed, logprobs=0,
                                 include_stop_str_in_output=True, skip_special_tokens=True, detokenize=True)
                  for n, seed in zip(p["max_tokens"], p["seeds"], strict=True)]
        outs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in req["prompts"]], params, use_tqdm=False)
        answers = []
        for out in outs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            lps = [float(step[t].logprob) for t, step in zip(ids, c.logprobs, strict=True)]
            answers.append({"ids": ids, "logprobs": lps, "text": c.text, "finish_reason": c.finish_reason,
                            "stop_reason": c.stop_reason if isinstance(c.stop_reason, str) else None})
        return {"outputs": answers}

    def score(req: dict) -> dict:
        params = SamplingParams(temperature=1.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        [out] = llm.generate([TokensPrompt(prompt_token_ids=req["ids"])], params, use_tqdm=False)
        return {"logprobs": [float(step[t].logprob) for t, step in zip(req["ids"][1:], out.prompt_logprobs[1:],
                                                                          strict=True)]}

    def reload(req: dict) -> dict:
        llm.collective_rpc("reload_weights", kwargs={"weights_path": req["path"]})
        llm.reset_prefix_cache()
        return {"ok": True}

    def stats(req: dict) -> dict:
        metrics = {m.name: m for m in llm.get_metrics()}
        return {"prefix_queries": int(metrics["vllm:prefix_cache_queries"].value),
                "prefix_hits": int(metrics["vllm:prefix_cache_hits"].value)}

    def reset(req: dict) -> dict:
        llm.reset_prefix_cache()
        return {"ok": True}

    ops = {"generate": generate, "score": score, "reload": reload, "stats": stats, "reset": reset}
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "shutdown":
            proto.write(json.dumps({"ok": True}) + "\n")
            return 0
        try:
            answer = ops[req["op"]](req)
        except Exception as e:  # noqa: BLE001 - the client turns it into one error line
            traceback.print_exc()
            answer = {"error": f"{type(e).__name__}: {e}"}
        proto.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
