"""The long-horizon recall domain: a fact given early is needed many turns later.

- ``_domain.py``: the task schema (a fact, the notes that follow it, the question), the prompt, the
  verifier, no-op, exploit fixtures, generators with levels (the higher, the more notes between
  the fact and the question: ``fact_distances``), and ``RecallEpisode``, the episode environment
  that shows one note per turn.

>>> from posttrain.envs.recall import ENV
>>> ENV.name, ENV.needs_sandbox
('recall', False)
"""

from posttrain.envs.recall._domain import ENV, RecallDomain, RecallEpisode, check_answer

__all__ = ["ENV", "RecallDomain", "RecallEpisode", "check_answer"]
