"""Tasks: loading task files of any domain, sampling for RL, and the quickstart generators.

>>> from posttrain.tasks import load_tasks, TaskSampler
"""

from posttrain.tasks._load import ResponseLine, iter_task_records, load_tasks, read_responses, warn_unanswered
from posttrain.tasks._sampler import TaskSampler

__all__ = ["ResponseLine", "TaskSampler", "iter_task_records", "load_tasks", "read_responses", "warn_unanswered"]
