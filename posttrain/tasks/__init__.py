"""Tasks: loading task files of any domain, a recipe's task sources (files, domains' generators and task
families), sampling for RL, the scripted demonstrator.

>>> from posttrain.tasks import load_tasks, TaskSampler, TaskSource, load_pools
"""

from posttrain.tasks._load import ResponseLine, iter_task_records, load_tasks, read_responses, warn_unanswered
from posttrain.tasks._sampler import TaskSampler
from posttrain.tasks._sources import TaskSource, family_names, load_demonstrations, load_pools, task_family

__all__ = ["ResponseLine", "TaskSampler", "TaskSource", "family_names", "iter_task_records", "load_demonstrations",
           "load_pools", "load_tasks", "read_responses", "task_family", "warn_unanswered"]
