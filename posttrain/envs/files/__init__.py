"""The files domain, whole: agent work on local files, graded on the workspace's final state.

- ``_env.py``: the task schema, prompt, verifier, no-op, levels and ``generate_tasks`` (its
  docstring says what is checked, in order, and why the single response is a JSON object of files);
- ``_workspace.py``: workspace files in a record, canonical paths, the final state and applying writes;
- ``_grade.py``: the final-state grader (``grade_final_state``) and the episode's process signals;
- ``_check.py``: a single response's parse and check, run in worker processes under a CPU budget;
- ``_gen.py``: the generated workspaces and their gold programs; ``_exploits.py``: the exploit fixtures;
- ``_episode.py``: agent episodes on the workspace kit (the final state read back from the workspace's
  layers on submit, reward.process); ``_agents.py``: the scripted oracle and cheat agents.

>>> from posttrain.envs.files import ENV
>>> ENV.name, ENV.needs_sandbox, ENV.level_range()
('files', False, (1, 5))
"""

from posttrain.envs.files._env import ENV, FilesEnv, make_files_verifier, render_files_prompt
from posttrain.envs.files._grade import Call, Target, grade_final_state, input_passages, process_signals
from posttrain.envs.files._workspace import Entry, apply_writes, check_path, decode_workspace, pristine_state

__all__ = ["ENV", "Call", "Entry", "FilesEnv", "Target", "apply_writes", "check_path", "decode_workspace",
           "grade_final_state", "input_passages", "make_files_verifier", "pristine_state", "process_signals",
           "render_files_prompt"]
