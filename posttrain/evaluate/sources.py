"""Where sampled responses come from: a local checkpoint (``posttrain.policy.Policy``) or an
OpenAI-compatible endpoint (``EndpointModel``: ``EndpointSampler`` + the model's tokenizer), both
token-level ``Sampler``s; and ``posttrain eval``'s episodes, through the episode runner.

- ``runner_episodes(model, tasks, kind, ...)``: every evaluation's samples, single answers and
  multi-turn episodes alike, built by ``posttrain.rollout.episodes`` and run by
  ``posttrain.rollout.run_batch`` (single answers: ``SingleTurnEnv``, one ``generate`` call over every
  (task, sample) prompt in order, each verified as a job of the service; episodes: observations
  appended as ids, never re-tokenized); records derived from the trajectories alone, one per attempt
  (``evaluate.records.trajectory_records``).
- ``episode_figures``: the episodes' headline figures for the summary.

A *model* here is what the runner needs of one: ``sampler()``, ``tokenizer``, ``encode_prompt(text)``.
``Policy`` has them; ``EndpointModel`` gives them to a server that takes prompt token ids
(``/v1/completions``, vLLM with ``--logprobs-mode processed_logprobs``; ``policy/_endpoint.py``),
held to what a local sampler gives (``HeldEndpoint``: ids past ``max_new_tokens`` are cut there, the
text scored is the ids decoded, never the server's own ``text``).
With ``chat=True`` (an ``EndpointModel``) or a chat ``Policy`` (``Policy.chat``), a prompt is the
tokenizer's chat template over one user message (``ChatTemplate.render``), still sent as ids, and a
repair episode's feedback is a user turn of the same template (``prompt_chat``, ``RepairEnv``).
``prompt_format`` states which rendering an evaluation used (its ``eval_protocol.prompt_format``).

Feedback labels (docs/records.md): ``posttrain.evaluate.records.feedback_source_after``.
What it does not do: the chat completions API (templates are rendered to ids here), HTTP retries (a
failed request is a clear ``UserError``).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posttrain.evaluate.records import EvalRecord
from posttrain.types import CANARY, Generation, Task, Verifier

if TYPE_CHECKING:
    from posttrain.rollout.episodes import EpisodeKind
    from posttrain.sched import Service

__all__ = [
    "EndpointModel",
    "HeldEndpoint",
    "episode_figures",
    "prompt_chat",
    "prompt_format",
    "runner_episodes",
]


@dataclass(frozen=True)
class EndpointModel:
    """A model behind an OpenAI-compatible endpoint, as ``posttrain eval`` samples a ``Policy``.

    >>> # tok = AutoTokenizer.from_pretrained(path)
    >>> # model = EndpointModel(EndpointSampler(url, "my-model", tokenizer=tok), tok)
    """

    endpoint: Any
    """The ``posttrain.policy.EndpointSampler``."""
    tokenizer: Any
    """The served model's tokenizer: prompts go out as its ids, completions come back as its ids."""
    chat: bool = False
    """Render each prompt as one user message with the tokenizer's chat template (and repair feedback
    as user turns)."""

    def sampler(self) -> Any:
        """The endpoint held to what a local sampler gives (``HeldEndpoint``)."""
        return HeldEndpoint(self.endpoint, self.tokenizer)

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


@dataclass(frozen=True)
class HeldEndpoint:
    """An endpoint's sampler held to what a local sampler gives: at most ``max_new_tokens`` ids per
    completion, and its ``text`` those ids decoded without special tokens (``Generation.text``).

    The ids (and logprobs) of a server that writes past ``max_tokens`` are cut there, as a local
    sampler would have stopped (``stop_reason`` ``length``): its answer after the budget would pass
    where the same model held to the budget (no answer yet) fails. A server's own ``text`` is never
    scored: the ids are what the record keeps, what the logprobs are of and what a repair episode's
    context goes on from, so a reply whose text holds a right answer and whose ids a wrong one is
    graded on the wrong one (a server's text and its ids decoded differ only where it is not the
    model's output; whitespace a tokenizer cannot spell is lost, as it is to a local sampler).

    What it does not check: that the logprobs are of the distribution sampled (``EndpointSampler``),
    or what a server does between the request and its ids (an internal best-of-n looks like a sample)."""

    endpoint: Any
    tokenizer: Any

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: Any) -> list[Generation]:
        out = []
        for g in self.endpoint.generate(prompt_ids, params):
            cap = params.max_new_tokens
            if len(g.completion_ids) > cap:
                g = dataclasses.replace(g, completion_ids=g.completion_ids[:cap], logprobs=g.logprobs[:cap],
                                        stop_reason="length")
            text = self.tokenizer.decode(list(g.completion_ids), skip_special_tokens=True)
            out.append(g if text == g.text else dataclasses.replace(g, text=text))
        return out


def runner_episodes(
    model: Any,
    tasks: Sequence[Task],
    kind: EpisodeKind,
    *,
    verify: Verifier | None = None,
    n: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    stage: str,
    max_attempts: int | None = None,
    max_turns: int | None = None,
    pool: Any | None = None,
    service: Service | None = None,
) -> tuple[list[EvalRecord], dict[str, float]]:
    """``n`` episodes of ``kind`` per task through the episode runner (``posttrain.rollout``),
    built in one place (``rollout.episodes.make_episodes``: ``single`` one answer; ``repair`` up to each task's
    ``limits.max_attempts`` attempts, ``max_attempts`` overriding it; ``agent``: each task's domain's
    own environment, ``max_turns`` its step limit, ``pool`` the sandbox it runs in): token-exact
    contexts (observations appended as ids, never re-tokenized). ``model``: a ``Policy`` or an
    ``EndpointModel``; ``verify``: what the environments verify with (default: ``service``'s nested
    lane). Returns one record per attempt
    (an episode cut before its verdict: one ``truncated`` record) and the episodes' statistics
    (``episode_metrics`` + ``episodes``: their count), canary tasks' episodes left out as ``summarize``
    leaves them out of the rates (their records are kept: a pass is a hack alarm). ``service``: each step runs as its job, an
    infra error restarting the episode (``rollout.run_batch``)."""
    from posttrain.evaluate.metrics import episode_metrics
    from posttrain.evaluate.records import trajectory_records
    from posttrain.policy import SamplingParams
    from posttrain.rollout.episodes import make_episodes, sample_tasks

    plan = make_episodes(kind, tasks, model, service=service, verify=verify, prompt_chat=prompt_chat(model), pool=pool,
                         max_turns=max_turns, max_attempts=max_attempts)

    def decode(ids: Sequence[int]) -> str:
        return model.tokenizer.decode(list(ids))

    params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    groups = sample_tasks(plan, model.sampler(), tasks, n=n, params=params, service=service, stage=stage)
    records = [rec for t, group in zip(tasks, groups, strict=True) for tr in group
               for rec in trajectory_records(t, tr, stage=stage, step=None, wall_s=0.0, decode=decode)]
    trajs = [tr for t, group in zip(tasks, groups, strict=True) if CANARY not in t.tags for tr in group]
    return records, {**episode_metrics(trajs), "episodes": float(len(trajs))}


def prompt_chat(model: Any) -> Any:
    """The ``ChatTemplate`` a model's prompts are rendered with (``Policy.chat``, ``EndpointModel.template``),
    or None for plain prompts: repair episodes render their feedback with the same."""
    return model.template if isinstance(model, EndpointModel) else model.chat


def prompt_format(model: Any, kind: EpisodeKind = "single") -> str:
    """How ``model``'s prompts are rendered in episodes of ``kind``, as an evaluation states it
    (``eval_protocol.prompt_format``): ``"plain"`` (the prompt text's ids), or ``"chat:<16 hex>"``, the
    start of the sha256 of the chat template's text that renders them (``prompt_chat``; agent episodes
    always render with the tokenizer's template, ``rollout.episodes.agent_chat``). What the sampler did,
    not what was asked: a checkpoint's recorded choice (``--chat`` not given) and an ``--endpoint``'s
    ``--tokenizer`` are in it. Two evaluations that state different ones asked the same tasks in other
    tokens, and ``evaluate.baseline`` does not judge one against the other.

    >>> from posttrain.policy import build_char_tokenizer
    >>> tok = build_char_tokenizer()
    >>> prompt_format(EndpointModel(None, tok)), prompt_format(EndpointModel(None, tok, chat=True))[:5]
    ('plain', 'chat:')
    """
    from posttrain.policy import prompt_template

    chat = prompt_template(model.tokenizer) if kind == "agent" else prompt_chat(model)
    if chat is None:
        return "plain"
    return "chat:" + hashlib.sha256(chat.template.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def episode_figures(summary: Mapping[str, Any], stats: Sequence[Mapping[str, float]], *,
                    max_attempts: int | None = None) -> dict[str, Any]:
    """The episodes' headline figures: first-attempt pass rate, post-repair pass rate (success
    within every attempt allowed: ``repair@<max_attempts - 1>``; without ``max_attempts``, the most
    any episode used), mean attempts to success, the episodes'
    turns, attempts, tokens after the prompt, truncation rate and tool calls (means over ``stats``,
    one ``runner_episodes`` result each, weighted by their episode counts), and the tool-call
    validity rate (valid calls / all calls; None when no call was made). When no episode used every
    attempt allowed (all passed sooner), success within them is success within the most used. The
    pass rates are None when the summary has none (every first attempt an infra error: no rate, as
    in the summary; a model that sends the verifier into infra errors everywhere is no traceback).

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
    first = summary.get("pass@1")  # None when no first attempt was scored (every one an infra error)
    return {
        "first_attempt_pass_rate": first,
        "post_repair_pass_rate": summary.get(f"repair@{within}", first) if within else first,
        "post_repair_key": f"repair@{rounds}" if rounds else "pass@1",
        "mean_attempts_to_success": summary.get("mean_attempts_to_success"),
        **means,
        "tool_call_validity": tool_call_validity(means),
    }
