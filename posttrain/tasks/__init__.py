"""Tasks: loading task files of any domain, sampling for RL, and the quickstart generators.

>>> from posttrain.tasks import load_tasks, TaskSampler
"""

from posttrain.tasks._load import load_tasks
from posttrain.tasks._sampler import TaskSampler

__all__ = ["TaskSampler", "load_tasks"]
