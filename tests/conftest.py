"""Suite-wide settings.

torch runs on one thread in tests: the sandbox workers and math-verify workers share the same two
cores, and OpenMP spin-waiting under oversubscription made sampling 20x slower here.
"""

import torch

torch.set_num_threads(1)

# Property tests share two cores with sandbox jobs and other suites: input generation may be slow
# there without anything being wrong, so no test fails on the clock (a test's own @settings may
# still narrow its examples). Loaded here, before the test modules build their settings on it.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("posttrain", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("posttrain")

# transformers' loading and saving bars go to stderr: `posttrain run` hides them (cli/pipeline.py), so in
# a process where a run already happened they are gone and elsewhere not. Hidden for the whole suite,
# so that a test that counts the lines of its stderr reads the same under any order (pytest-xdist).
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.disable_progress_bar()
