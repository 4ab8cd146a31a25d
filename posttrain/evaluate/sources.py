"""Where sampled responses come from: a local checkpoint (``posttrain.policy.Policy``) or an
OpenAI-compatible endpoint (``EndpointModel``: ``EndpointSampler`` + the model's tokenizer), both
token-level ``Sampler``s; and ``posttrain eval``'s episodes, through the episode runner.

- ``sample_responses(model, tasks, ...)``: single attempts, ``n`` per task, one ``generate`` call
  over every (task, sample) prompt in order (the prompt is the domain's rendering,
  ``posttrain.envs.model_prompt``, encoded by ``model.encode_prompt``); the caller verifies them.
- ``runner_episodes(model, tasks, verifiers, episodes=...)``: repair episodes (``RepairEnv``) or
  tool-calling episodes (``ToolEpisodeEnv``) through ``posttrain.rollout.run_batch``: observations
  appended as ids, never re-tokenized; one record per attempt (``train._runlog.trajectory_records``).
- ``episode_figures``: the episodes' headline figures for the summary.

A *model* here is what the runner needs of one: ``sampler()``, ``tokenizer``, ``encode_prompt(text)``.
``Policy`` has them; ``EndpointModel`` gives them to a server that takes prompt token ids
(``/v1/completions``, vLLM with ``--logprobs-mode processed_logprobs``; ``policy/_endpoint.py``).
With ``chat=True`` (an ``EndpointModel``) or a chat ``Policy`` (``Policy.chat``), a prompt is the
tokenizer's chat template over one user message (``ChatTemplate.render``), still sent as ids, and a
repair episode's feedback is a user turn of the same template (``prompt_chat``, ``RepairEnv``).

Feedback labels (docs/records.md): ``posttrain.train._runlog.feedback_source_after``.
What it does not do: the chat completions API (templates are rendered to ids here), HTTP retries (a
failed request is a clear ``UserError``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posttrain.evaluate.records import EvalRecord
from posttrain.evaluate.runner import Response
from posttrain.types import Task

if TYPE_CHECKING:
    from posttrain.sched import Service

__all__ = [
    "EndpointModel",
    "TOOL_STEPS",
    "episode_figures",
    "prompt_chat",
    "runner_episodes",
    "sample_responses",
]


@dataclass(frozen=True)
class EndpointModel:
    """A model behind an OpenAI-compatible endpoint, as ``posttrain eval`` samples a ``Policy``.

    >>> # model = EndpointModel(EndpointSampler(url, "my-model"), AutoTokenizer.from_pretrained(path))
    """

    endpoint: Any
    """The ``posttrain.policy.EndpointSampler``."""
    tokenizer: Any
    """The served model's tokenizer: prompts go out as its ids, completions come back as its ids."""
    chat: bool = False
    """Render each prompt as one user message with the tokenizer's chat template (and repair feedback
    as user turns)."""

    def sampler(self) -> Any:
        return self.endpoint

    @property
    def template(self) -> Any:
        """The ``ChatTemplate`` prompts are rendered with (``chat``), else None."""
        from posttrain.policy import prompt_template

        return prompt_template(self.tokenizer) if self.chat else None

    def encode_prompt(self, text: str) -> list[int]:
        """Prompt text -> ids: the chat template's rendering (``chat``), else the tokenizer's ids with
        BOS first when it has one (as ``Policy.encode_prompt``)."""
        if self.chat:
            return self.template.render([{"role": "user", "content": text}])
        ids = list(self.tokenizer(text, add_special_tokens=True)["input_ids"])
        bos = self.tokenizer.bos_token_id
        return ids if bos is None or ids[:1] == [bos] else [bos, *ids]


def sample_responses(model: Any, tasks: Sequence[Task], *, n: int, temperature: float, max_new_tokens: int,
                     seed: int) -> list[Response]:
    """``n`` single attempts per task in one ``generate`` call (prompt order: task, then sample), token
    ids kept. A local sampler seeds the call with ``seed``; an endpoint sends prompt i ``seed + i``."""
    from posttrain.envs import model_prompt
    from posttrain.policy import SamplingParams

    texts = [model_prompt(t) for t in tasks]
    prompts = [model.encode_prompt(text) for text in texts for _ in range(n)]
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    t0 = time.perf_counter()
    gens = model.sampler().generate(prompts, params)
    per = (time.perf_counter() - t0) / max(1, len(prompts))
    return [Response(t.id, g.text, sample_idx=j % n, prompt=texts[j // n], prompt_ids=tuple(g.prompt_ids),
                     completion_ids=tuple(g.completion_ids), gen_s=per)
            for j, (t, g) in enumerate(zip([t for t in tasks for _ in range(n)], gens, strict=True))]


def runner_episodes(
    policy: Any,
    tasks: Sequence[Task],
    verifiers: Mapping[str, Any],
    *,
    n: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    stage: str,
    max_attempts: int | None = None,
    episodes: str = "repair",
    max_turns: int | None = None,
    pool: Any | None = None,
    service: Service | None = None,
) -> tuple[list[EvalRecord], dict[str, float]]:
    """``n`` episodes per task through the episode runner (``posttrain.rollout``): token-exact
    contexts (observations appended as ids, never re-tokenized). ``episodes``: ``repair`` (up to
    each task's ``limits.max_attempts`` attempts; ``max_attempts`` overrides it) or ``tool``
    (tool-calling episodes built by each task's domain, ``posttrain.envs.tool.tool_episode_envs``:
    ``ToolEpisodeEnv``, or ``BfclEnv`` with its backends in ``pool``; ``max_turns``, default
    ``TOOL_STEPS``, is a tool task's step limit and a BFCL task's per-user-turn cap on steps with
    calls, the runner's cap following from the tasks: ``envs.tool.action_limit``). ``model``: a ``Policy`` or an ``EndpointModel``. Returns one record per attempt (an episode cut before its verdict: one
    ``truncated`` record) and the episodes' statistics (``episode_metrics`` + ``episodes``: their count).
    ``service``: each step runs as its job, an infra error restarting the episode (``rollout.run_batch``)."""
    from posttrain.evaluate.metrics import episode_metrics
    from posttrain.policy import SamplingParams
    from posttrain.rollout import Episode, VerdictCache, repair_envs, run_batch
    from posttrain.train._runlog import trajectory_records  # records of trajectories live with the trainer's

    if episodes == "tool":
        from posttrain.envs.tool import action_limit, tool_episode_envs
        from posttrain.policy import ChatTemplate

        steps = max_turns or TOOL_STEPS
        make = tool_episode_envs(ChatTemplate(policy.tokenizer), max_steps=steps, pool=pool)
        turns = action_limit(tasks, steps)  # BFCL: each task's user turns x (its per-turn cap + 1)
    elif episodes == "repair":
        make = repair_envs(policy, verifiers, VerdictCache(), chat=prompt_chat(policy), max_attempts=max_attempts,
                           infra_retries=0 if service is not None else 2)
        turns = max_turns or max_attempts or max(t.limits.max_attempts for t in tasks)
    else:
        raise ValueError(f"episodes must be 'repair' or 'tool', got {episodes!r}")
    runs = [Episode(t, make(t), f"{stage}/{t.id}", i, make) for t in tasks for i in range(n)]

    def decode(ids: Sequence[int]) -> str:
        return policy.tokenizer.decode(list(ids))

    params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    trajs = run_batch(policy.sampler(), runs, params, max_turns=turns, service=service)  # steps as its jobs
    records = [rec for ep, tr in zip(runs, trajs, strict=True)
               for rec in trajectory_records(ep.task, tr, stage=stage, step=None, wall_s=0.0, decode=decode)]
    return records, {**episode_metrics(trajs), "episodes": float(len(trajs))}


def prompt_chat(model: Any) -> Any:
    """The ``ChatTemplate`` a model's prompts are rendered with (``Policy.chat``, ``EndpointModel.template``),
    or None for plain prompts: repair episodes render their feedback with the same."""
    return model.template if isinstance(model, EndpointModel) else model.chat


TOOL_STEPS = 4
"""The default step limit of a tool-calling episode (``eval.max_turns`` / ``rl.max_turns`` set it): the
actions of a tool task's episode, the steps with calls of each user turn of a BFCL task's."""


def episode_figures(summary: Mapping[str, Any], stats: Sequence[Mapping[str, float]], *,
                    max_attempts: int | None = None) -> dict[str, Any]:
    """The episodes' headline figures: first-attempt pass rate, post-repair pass rate (success
    within every attempt allowed: ``repair@<max_attempts - 1>``; without ``max_attempts``, the most
    any episode used), mean attempts to success, the episodes'
    turns, attempts, tokens after the prompt, truncation rate and tool calls (means over ``stats``,
    one ``runner_episodes`` result each, weighted by their episode counts), and the tool-call
    validity rate (valid calls / all calls; None when no call was made). When no episode used every
    attempt allowed (all passed sooner), success within them is success within the most used.

    >>> f = episode_figures({"pass@1": 0.2, "max_attempts": 3, "repair@2": 0.7, "mean_attempts_to_success": 1.9},
    ...                     [{"turns": 2.0, "tool_calls": 2.0, "tool_calls_valid": 1.0, "episodes": 4.0},
    ...                      {"turns": 4.0, "tool_calls": 0.0, "tool_calls_valid": 0.0, "episodes": 4.0}])
    >>> f["post_repair_pass_rate"], f["turns"], f["tool_call_validity"]
    (0.7, 3.0, 0.5)
    >>> g = episode_figures({"pass@1": 0.0, "max_attempts": 2, "repair@1": 1.0}, [{"turns": 2.0, "episodes": 1.0}],
    ...                     max_attempts=3)  # every episode passed at its second attempt of three
    >>> g["post_repair_key"], g["post_repair_pass_rate"]
    ('repair@2', 1.0)
    """
    from posttrain.evaluate.metrics import tool_call_validity

    n = [s["episodes"] for s in stats]
    means = {k: sum(s[k] * w for s, w in zip(stats, n, strict=True)) / sum(n) for k in stats[0] if k != "episodes"}
    used = int(summary.get("max_attempts", 1)) - 1  # the most feedback rounds any episode had
    rounds = used if max_attempts is None else max_attempts - 1
    within = min(rounds, used)
    return {
        "first_attempt_pass_rate": summary["pass@1"],
        "post_repair_pass_rate": summary.get(f"repair@{within}", summary["pass@1"]) if within else summary["pass@1"],
        "post_repair_key": f"repair@{rounds}" if rounds else "pass@1",
        "mean_attempts_to_success": summary.get("mean_attempts_to_success"),
        **means,
        "tool_call_validity": tool_call_validity(means),
    }
