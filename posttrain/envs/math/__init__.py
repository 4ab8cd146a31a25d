"""The math domain, whole: a final answer in ``\\boxed{...}`` compared exactly with the gold answer.

- ``_env.py``: the task schema, prompt, verifier, no-op, exploit fixtures and ``generate_tasks``
  (its docstring says what is checked, in order);
- ``_check.py``: the exact comparison (rationals, forms, tolerance), run in worker processes under
  a CPU budget;
- ``_form.py``: answer forms (an answer, not the work that leads to it), over ``_read.py``'s
  reader of a value's LaTeX;
- ``_quickstart.py``: the quickstart family (``quickstart-math``) and its demonstrator's mistake.

>>> from posttrain.envs.math import ENV, extract_boxed
>>> ENV.name, extract_boxed("so \\\\boxed{12}")[0]
('math', '12')
"""

from posttrain.envs.math._env import ENV, MathEnv, extract_boxed, make_math_verifier

__all__ = ["ENV", "MathEnv", "extract_boxed", "make_math_verifier"]
