"""Suite-wide settings.

torch runs on one thread in tests: the sandbox workers and math-verify workers share the same two
cores, and OpenMP spin-waiting under oversubscription made sampling 20x slower here.
"""

import torch

torch.set_num_threads(1)
