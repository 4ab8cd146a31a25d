"""Tasks: loading task files of any domain (JSON, JSONL, Parquet, Arrow, Hugging Face ``datasets``), a
recipe's task sources (files, domains' generators and task families, curricula), the pool's
decontamination, RL samplers (uniform; the task pool: difficulty pools, filtering, curricula,
domain weights, canaries), canary alarms, per-domain metrics, ``tasks list``/``stats``, the
scripted demonstrator.

>>> from posttrain.tasks import load_tasks, TaskSampler, TaskSource, load_pools, TaskPool, make_sampler
"""

from posttrain.tasks._build import make_sampler
from posttrain.tasks._canary import CanaryAlarm, canary_alarms, canary_metrics, is_canary, make_canaries
from posttrain.tasks._curriculum import Stream
from posttrain.tasks._decontaminate import Contamination, check_pools, find_contamination
from posttrain.tasks._difficulty import Difficulty, level_prior
from posttrain.tasks._load import (
    ResponseLine,
    is_pipe,
    iter_task_records,
    load_tasks,
    read_pipe,
    read_responses,
    scan_tasks,
    warn_unanswered,
)
from posttrain.tasks._metrics import domain_metrics
from posttrain.tasks._pool import TaskPool
from posttrain.tasks._refill import Filled, fill_batch
from posttrain.tasks._sampler import TaskSampler
from posttrain.tasks._sources import TaskSource, family_names, load_demonstrations, load_pools, task_family
from posttrain.tasks._spec import CurriculumSpec, FilterSpec, MixPoint, SamplerSpec, StratifySpec
from posttrain.tasks._stats import DomainRow, RunStats, format_domains, format_stats, list_domains, run_stats

__all__ = ["CanaryAlarm", "Contamination", "CurriculumSpec", "Difficulty", "DomainRow", "Filled", "FilterSpec",
           "MixPoint", "ResponseLine", "RunStats", "SamplerSpec", "Stream", "StratifySpec", "TaskPool",
           "TaskSampler", "TaskSource", "canary_alarms", "canary_metrics", "check_pools", "domain_metrics",
           "family_names", "fill_batch", "find_contamination", "format_domains", "format_stats", "is_canary",
           "is_pipe", "iter_task_records", "level_prior", "list_domains", "load_demonstrations", "load_pools",
           "load_tasks", "make_canaries", "make_sampler", "read_pipe", "read_responses", "run_stats", "scan_tasks",
           "task_family", "warn_unanswered"]
