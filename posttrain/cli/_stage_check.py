"""Is a finished stage's checkpoint whole? Read before ``--resume`` loads any of them.

A stage checkpoint (RUN/checkpoints/<stage>, marked done) is ``save_pretrained``'s files: JSON
(config.json, tokenizer.json, posttrain.json, ...) and safetensors weights. A disk that filled, a
copy cut short or a hand edit leaves one of them truncated, and the resumed run found out only when
it loaded that stage: after it had re-evaluated the demonstrator and the stages before, with
safetensors' or json's traceback. ``stage_checkpoint_problem`` reads what loading would (every
JSON file parses; every safetensors header parses and the tensors it lists fit in the file) without
loading a tensor: milliseconds, however large the model.

Covered: truncation, a JSON file that does not parse, weights missing, a safetensors header that is
not one. Not covered: weights whose bytes are whole but wrong (bit rot inside a tensor), and a
config that parses but does not match the weights (the load itself says so).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

_MAX_HEADER = 100 * 2**20
"""safetensors' own limit on a header's size."""


def stage_checkpoint_problem(path: Path) -> str | None:
    """What makes the checkpoint in ``path`` unloadable (naming the file), or None when it is whole."""
    try:
        files = sorted(p for p in path.iterdir() if p.is_file())
    except OSError as e:
        return f"{path}: cannot list it ({e.strerror or e})"
    for f in (p for p in files if p.suffix == ".json"):
        try:
            json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            return f"{f}: not readable JSON ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    weights = [p for p in files if p.suffix == ".safetensors"]
    if not weights and not any(p.suffix == ".bin" for p in files):
        return f"{path}: holds no weights (no .safetensors file)"
    for f in weights:
        if (why := _safetensors_problem(f)) is not None:
            return f"{f}: {why}"
    return None


def _safetensors_problem(f: Path) -> str | None:
    try:
        size = f.stat().st_size
        with f.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"truncated ({size} bytes, not even a header)"
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER or 8 + n > size:
                return f"truncated or not safetensors (a header of {n:,} bytes in a file of {size:,})"
            header = json.loads(fh.read(n))
    except OSError as e:
        return f"cannot read it ({e.strerror or e})"
    except (UnicodeDecodeError, ValueError):
        return "truncated or not safetensors (its header is not JSON)"
    if not isinstance(header, dict):
        return "not safetensors (its header is not a JSON object)"
    ends = [v.get("data_offsets", [0, 0])[1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    need = max((e for e in ends if isinstance(e, int)), default=0)
    have = size - 8 - n
    if need > have:
        return f"truncated: its header lists {need:,} bytes of tensors, the file holds {have:,}"
    return None
