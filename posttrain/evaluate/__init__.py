"""Evaluation you can trust: multi-attempt metrics, summaries, reports, audits, clean splits.

- ``metrics``: pure functions (pass@k, pass^k, repair@r, attempts, clustered bootstrap CIs).
- ``records``: the per-(task, sample, attempt) JSONL record (docs/records.md).
- ``summary``: ``summarize(records)`` -> the summary.json entry of one evaluation.
- ``runner`` / ``sources``: scoring responses with the real verifiers; generation from a local
  checkpoint or an OpenAI-compatible endpoint.
- ``baseline``: per-domain comparison with intervals; ``decontaminate``: n-gram overlap.
- ``report``: ``write_report(run_dir)``; ``audit``: sampled re-verification + review page.
- ``loggers``: ``make_loggers(run_dir, tensorboard=..., mlflow=...)``.

The CLI (``posttrain eval | report | audit``) lives in ``posttrain.cli.evaluate``; see
docs/evaluation.md. Heavy dependencies (torch, transformers, the sandbox) load only when used.
"""

from posttrain.evaluate.audit import AuditResult, run_audit
from posttrain.evaluate.baseline import compare, load_baseline
from posttrain.evaluate.decontaminate import check_clean_split, cmd_decontaminate, find_overlap
from posttrain.evaluate.loggers import MetricsLogger, make_loggers
from posttrain.evaluate.metrics import (
    bootstrap_ci,
    mean_attempts_to_success,
    pass_at_k,
    pass_at_k_per_task,
    pass_hat_k,
    pass_hat_k_per_task,
    repair_at_r,
)
from posttrain.evaluate.records import EvalRecord, read_records, record_from_verdict, write_records
from posttrain.evaluate.report import write_report
from posttrain.evaluate.runner import Response, load_suite, noop_baseline, read_responses, score_responses
from posttrain.evaluate.summary import summarize

__all__ = [
    "AuditResult",
    "EvalRecord",
    "MetricsLogger",
    "Response",
    "bootstrap_ci",
    "check_clean_split",
    "cmd_decontaminate",
    "compare",
    "find_overlap",
    "load_baseline",
    "load_suite",
    "make_loggers",
    "mean_attempts_to_success",
    "noop_baseline",
    "pass_at_k",
    "pass_at_k_per_task",
    "pass_hat_k",
    "pass_hat_k_per_task",
    "read_records",
    "read_responses",
    "record_from_verdict",
    "repair_at_r",
    "run_audit",
    "score_responses",
    "summarize",
    "write_records",
    "write_report",
]
