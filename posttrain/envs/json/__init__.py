"""The structured-output domain, whole: one JSON document checked by strict parse, schema, and value.

- ``_env.py``: the task schema, prompt, verifier (in a worker process under a CPU budget), no-op,
  exploit fixtures and ``generate_tasks``.

Strict JSON parsing (``posttrain.strict_json``) and JSON Schema validation on exact numbers
(``posttrain.verify.json_schema``) stay generic: task files, the tool domain and the chat
template's tool-call parser use them too.

>>> from posttrain.envs.json import ENV
>>> ENV.name, ENV.needs_sandbox
('json', False)
"""

from posttrain.envs.json._env import ENV, JsonEnv, make_json_verifier

__all__ = ["ENV", "JsonEnv", "make_json_verifier"]
