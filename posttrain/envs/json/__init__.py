"""The structured-output domain, whole: one JSON document checked by strict parse, schema, and value.

- ``_env.py``: the task schema, prompt, verifier (in a worker process under a CPU budget), no-op,
  exploit fixtures and ``generate_tasks``; ``validator_for`` / ``schema_error`` are shared with the
  tool domain, whose arguments are JSON Schema too.

Strict JSON parsing itself (``posttrain.verify.strict_json``) stays generic: task files, the tool
domain and the chat template's tool-call parser use it too.

>>> from posttrain.envs.json import ENV
>>> ENV.name, ENV.needs_sandbox
('json', False)
"""

from posttrain.envs.json._env import ENV, JsonEnv, make_json_verifier, schema_error, validator_for

__all__ = ["ENV", "JsonEnv", "make_json_verifier", "schema_error", "validator_for"]
