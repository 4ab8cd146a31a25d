"""Rewards as Python functions: a task's reward is ``f(prompt, completion, **data)`` (or TRL's
``f(prompts, completions, **data)``), named ``package.module:function`` in a recipe's top-level
``reward:`` or in the task record, run in a CPU-budgeted worker under the verifier contract.

- ``_domain.py``: the domain (records, verifier, exploit fixtures, generator), ``default_reward``
  (a recipe's function for records naming none), ``noop_problems`` (the run's warnings);
- ``_spec.py``: ``RewardTerm`` (function, weight, range) and the import probe;
- ``_worker.py``: the check worker's side (import once, call per completion);
- ``examples``: reward functions that ship with posttrain (``exact_match``, ``boxed_match``, TRL's
  ``format_reward``); ``_broken``: functions that break the contract, for the fixtures.

>>> from posttrain.envs.function import ENV
>>> t = ENV.parse_task({"id": "a", "prompt": "2+2?", "data": {"answer": "4"},
...                     "reward": "posttrain.envs.function.examples:exact_match"}, "doc")
>>> [v.outcome for v in (ENV.make_verifier()(t, "4"), ENV.make_verifier()(t, "5"))]
['pass', 'fail']
"""

from posttrain.envs.function._domain import (
    ENV,
    FunctionDomain,
    default_reward,
    make_function_verifier,
    noop_problems,
    task_terms,
    verify_function,
)
from posttrain.envs.function._spec import RewardTerm, as_terms

__all__ = ["ENV", "FunctionDomain", "RewardTerm", "as_terms", "default_reward", "make_function_verifier",
           "noop_problems", "task_terms", "verify_function"]
