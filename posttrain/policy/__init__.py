"""Model and tokenizer loading (transformers) and token-exact generation.

>>> from posttrain.policy import build_embedded_default, load_policy
>>> # policy = load_policy(build_embedded_default("/tmp/m"))
"""

from posttrain.policy._embedded import EmbeddedModelSpec, build_char_tokenizer, build_embedded_default
from posttrain.policy._policy import Generation, Policy, load_policy

__all__ = [
    "EmbeddedModelSpec",
    "Generation",
    "Policy",
    "build_char_tokenizer",
    "build_embedded_default",
    "load_policy",
]
