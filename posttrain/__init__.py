"""posttrain: post-training for causal language models on verified tasks.

See README.md for the two commands and DESIGN in docs/ for the loop.
"""

__version__ = "0.1.0"
