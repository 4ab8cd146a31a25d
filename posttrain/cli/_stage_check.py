"""Is a finished stage's checkpoint whole? Read before ``--resume`` loads any of them.

A stage checkpoint (RUN/checkpoints/<stage>, marked done) is ``save_pretrained``'s files: JSON
(config.json, tokenizer.json, posttrain.json, ...) and safetensors weights. A disk that filled, a
copy cut short or a hand edit leaves one of them truncated, and the resumed run found out only when
it loaded that stage: after it had re-evaluated the demonstrator and the stages before, with
safetensors' or json's traceback. ``stage_checkpoint_problem`` reads what loading would (every
JSON file parses; every safetensors header parses and the tensors it lists fit in the file) without
loading a tensor: milliseconds, however large the model.

A copy cut short also leaves files out whole: ``config.json`` (the load cannot build the model), a
shard of sharded weights or their index (``model.safetensors.index.json``), which the load found only
when it opened them. And an index whose ``weight_map`` names a shard that does not hold the tensor
loaded without it: transformers initialised the tensor afresh (a "MISSING" line in its load report)
and the run went on with a model that was not the stage's.

Covered: truncation, a JSON file that does not parse, weights missing, a safetensors header that is
not one, ``config.json`` missing, a shard missing or not holding what its index names, shards without
their index. Not covered: weights whose bytes are whole but wrong (bit rot inside a tensor), and a
config that parses but does not match the weights (the load itself says so).
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

_MAX_HEADER = 100 * 2**20
"""safetensors' own limit on a header's size."""

CONFIG = "config.json"
INDEX_SUFFIX = ".safetensors.index.json"
_SHARD = re.compile(r"-\d+-of-\d+\.safetensors$")


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
    if not (path / CONFIG).is_file():
        return f"{path / CONFIG}: missing (the load cannot build the model without it)"
    headers: dict[str, set[str]] = {}
    for f in weights:
        header = _safetensors_header(f)
        if isinstance(header, str):
            return f"{f}: {header}"
        headers[f.name] = header
    return _index_problem(path, files, headers)


def _index_problem(path: Path, files: list[Path], headers: dict[str, set[str]]) -> str | None:
    """Every shard an index names is there and holds the tensors it names; shards have their index."""
    indexes = [p for p in files if p.name.endswith(INDEX_SUFFIX)]
    if not indexes and (shard := next((n for n in headers if _SHARD.search(n)), None)) is not None:
        return f"{path / ('model' + INDEX_SUFFIX)}: missing (the index of the sharded weights, {shard} among them)"
    for index in indexes:
        data = json.loads(index.read_text(encoding="utf-8"))  # parsed once already: it is JSON
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict):
            return f"{index}: not an index of weights (no 'weight_map' object)"
        for tensor, shard in weight_map.items():
            if not isinstance(shard, str) or shard not in headers:
                return f"{path / str(shard)}: missing (named by {index.name} for {tensor})"
            if tensor not in headers[shard]:
                return f"{index}: names {shard} for {tensor}, which that shard does not hold"
    return None


def _safetensors_header(f: Path) -> set[str] | str:
    """The tensor names ``f``'s header lists, or what makes it unloadable."""
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
    return {k for k in header if k != "__metadata__"}
