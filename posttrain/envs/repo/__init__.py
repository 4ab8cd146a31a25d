"""The repo domain: terminal programming in real repositories, graded as SWE-bench grades.

A task is a repository snapshot at a base commit, an issue, and the pytest ids that must pass
after the fix (``fail_to_pass``) and keep passing (``pass_to_pass``); the response is a unified
diff. The grader applies the diff's source part to a fresh pristine copy, restores the
verifier's tests, and runs the listed tests in a sandbox job of its own under a harness whose
report the code under test cannot forge (docs/repo-verifier-threat-model.md).

- ``_task.py``: the schema (docs/tasks.md, "repo") and the trees a task stands for;
- ``_diff.py``: unified diffs: parse, classify paths (the diff policy), apply;
- ``_grade.py``: the grader (host side); ``_harness.py``: what runs in the sandbox;
- ``_constraints.py``: the checked constraints (``keep_public_api``, ``add_unit_tests``);
- ``_gen.py``, ``_mutate.py``: tasks from vendored projects by AST mutation (``data/projects``,
  ``data/packs``), with difficulty levels; ``_handwritten.py``: multi-file tasks written by hand;
- ``_swebench.py``: SWE-bench rows to tasks, when the repository is present locally;
- ``_hacks.py``: the exploit fixtures.

>>> from posttrain.envs.repo import ENV
>>> ENV.name, ENV.needs_sandbox
('repo', True)
"""

from posttrain.envs.repo._domain import ENV, RepoEnv, make_repo_verifier, render_prompt, response_of

__all__ = ["ENV", "RepoEnv", "make_repo_verifier", "render_prompt", "response_of"]
