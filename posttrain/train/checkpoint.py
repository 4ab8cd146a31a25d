"""Atomic checkpoints for exact resume: model, optimizer, LR schedule, every RNG, sampler state, step.

Layout of a checkpoint directory ``DIR``::

    DIR/latest                 the name of the newest complete checkpoint: JSON {"name": "step-000012",
                               "step": 12} as a save writes it, or the bare name as a person writes it
    DIR/step-000012/model/     model.save_pretrained (safetensors) + tokenizer.save_pretrained
                               (+ posttrain.json: how its prompts are rendered, when given)
    DIR/step-000012/state.pt   optimizer, scheduler and RNG states (torch.save, loaded weights_only)
    DIR/step-000012/state.json step, sampler_state, extra (JSON)
    DIR/step-000012/MANIFEST.json  size and sha256 of every file above, written last, and of the files
                               of DIR the checkpoint needs beside it (``beside``: RL's reference.pt,
                               the PPO critic's critic-12.pt), written before it

A checkpoint is written into ``DIR/.tmp-step-000012-<pid>``, fsynced, renamed into place with
``os.replace``, and only then is ``latest`` replaced (also write-then-rename). A process killed at
any moment leaves either the old ``latest`` or the new one, never a half-written checkpoint under
that name; leftover temp directories are ignored and removed by the next save. A save that fails
(a full disk: ENOSPC or a quota) removes its half-written copy at once, so the space it took is
free again, and a full disk (or a write the device refused: EIO, a read-only filesystem, permissions) is
one ``CheckpointError`` naming the directory, ``latest`` untouched; a ``UserError`` is never taken
for a full disk by ``disk_full`` (its own line is kept, not replaced by a caller's). ``load_latest``
verifies the manifest and raises ``CheckpointError`` (a ``UserError``) naming the file and the
problem when the checkpoint ``latest`` points to is corrupt or partial; older checkpoints are never
deleted in that case. ``latest`` names a ``step-N`` directory of ``DIR`` only (never a path out of it:
a neighbour run's checkpoint), and the manifest lists every file of the checkpoint, no more and no
fewer (an unlisted ``model/*.safetensors`` would be loaded over the saved weights), and the files of
``DIR`` it was saved with (``beside``): one of them cut short or replaced is refused by ``load_latest``
too, naming it. ``keep_last`` prunes older complete checkpoints after a successful save.
``commit_dir`` publishes any directory the same way (the run pipeline's per-stage checkpoints).

RNG states restored: Python ``random``, NumPy's global generator, torch CPU and (when present) CUDA.
Not covered: RNG objects owned by user code (``torch.Generator`` instances, ``np.random.Generator``)
-- put their state in ``sampler_state``; data-loader worker processes. A data-parallel run
(``train._dist``) writes this same layout from rank 0, with every rank's RNG states under
``rng["ranks"]``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posttrain.errors import UserError
from posttrain.tasks._stats import checkpoint_name

LATEST = "latest"
MANIFEST = "MANIFEST.json"
FORMAT_VERSION = 1
_BESIDE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
"""What a manifest's ``beside`` may name: a file of the checkpoint's own ``DIR`` (never a path)."""


class CheckpointError(UserError):
    """A checkpoint is corrupt, partial, or does not match the model it is restored into."""


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint on disk; ``restore`` loads it into live objects."""

    path: Path
    step: int
    sampler_state: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def model_dir(self) -> Path:
        """Directory loadable with ``from_pretrained`` (model + tokenizer)."""
        return self.path / "model"


def _name(step: int) -> str:
    return f"step-{step:06d}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_tree(root: Path) -> None:
    for p in sorted(root.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        _fsync_dir(d)


def _fsync_dir(d: Path) -> None:
    """fsync directory ``d``: the names created or renamed in it survive a crash."""
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rng_state() -> dict[str, Any]:
    """Every RNG state a checkpoint restores (Python, NumPy, torch CPU and CUDA), as saved."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos)},
        "numpy_gauss": {"has_gauss": int(has_gauss), "gauss": float(gauss)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Set every RNG from a state ``rng_state`` took."""
    random.setstate(state["python"])
    n = state["numpy"]
    g = state["numpy_gauss"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], g["has_gauss"], g["gauss"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(
    directory: str | Path,
    *,
    model: torch.nn.Module,
    tokenizer: Any | None,
    optimizer: torch.optim.Optimizer | Mapping[str, Any] | None,
    scheduler: Any | None,
    step: int,
    sampler_state: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    keep_last: int | None = 3,
    rng: Mapping[str, Any] | None = None,
    chat: bool | None = None,
    beside: Sequence[str] = (),
) -> Path:
    """Write a complete checkpoint for ``step`` atomically, point ``latest`` at it, prune old ones.

    ``sampler_state`` and ``extra`` must be JSON-serializable (the task sampler's cursor and RNG
    seed, the run's finished flag, ...). ``rng``: the RNG states to save (``rng_state()`` taken
    earlier, e.g. by a generator thread right after the batches the checkpoint queues); default the
    process's states now. ``chat``: whether the model's prompts are chat-rendered, recorded in
    ``model/`` as a stage checkpoint records it (``posttrain.policy.record_chat``), so that
    ``posttrain eval --model DIR/step-N/model`` renders them alike; None: no record. ``optimizer``:
    the optimizer, or its state dict as ``optimizer.state_dict()`` gives it (a sharded run's,
    ``train._dist.save_state``). ``beside``: names of files of ``directory``, written before, that
    resuming this checkpoint reads (RL's reference, the PPO critic of this step); the manifest holds
    their sizes and sha256 as it does its own files'. Returns the checkpoint's path.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if bad := [n for n in beside if not _BESIDE.fullmatch(n) or not (directory / n).is_file()]:
        raise ValueError(f"beside names {bad[0]!r}, not a file of {directory}")
    for stale in directory.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)  # left by a process killed mid-save
    for stale in directory.glob(f".{LATEST}.tmp-*"):
        stale.unlink(missing_ok=True)  # a pointer killed before its rename
    name = _name(step)
    tmp = directory / f".tmp-{name}-{os.getpid()}"
    try:
        final = _write(directory, tmp, name, model=model, tokenizer=tokenizer, optimizer=optimizer,
                       scheduler=scheduler, step=step, sampler_state=sampler_state, extra=extra, rng=rng, chat=chat,
                       beside=beside)
    except Exception as e:
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written checkpoint would hold the space that ran out
        for left in directory.glob(f".{LATEST}.tmp-{os.getpid()}"):
            left.unlink(missing_ok=True)
        full = disk_full_error(e)
        if (cause := full or _device_error(e)) is None:
            raise
        what, then = ("no space left on the device", "free space") if full else ("cannot write", "fix that")
        raise CheckpointError(f"{directory}: {what} while saving checkpoint {name} ({type(cause).__name__}: "
                              f"{str(cause).splitlines()[0] if str(cause) else ''}); the half-written "
                              f"copy was removed and {directory / LATEST} still names the last complete checkpoint: "
                              f"{then}, then --resume") from None
    if keep_last is not None:
        _prune(directory, keep_last, keep=name)
    return final


def disk_full(e: BaseException) -> bool:
    """Whether ``e`` (or the error it was raised in the handling of) is a full disk or quota: torch.save
    raises a RuntimeError whose context holds the OSError, safetensors an error naming "os error 28".
    A ``UserError`` is not: it has said what happened in its own line (a full disk at a checkpoint, at a
    run log's append), which a caller saying "full disk" again would replace."""
    return disk_full_error(e) is not None


def disk_full_error(e: BaseException) -> BaseException | None:
    """The deepest error of ``e``'s chain that says the disk is full (``disk_full``), the one a line
    quotes: torch.save's own RuntimeError says "unexpected pos 704 vs 598", the OSError in its context
    "[Errno 28] No space left on device". None when no error does, or ``e`` is a ``UserError``."""
    if isinstance(e, UserError):
        return None
    full, seen = None, set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        if getattr(x, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "os error 28" in str(x) \
                or "No space left on device" in str(x):
            full = x
        x = x.__cause__ or x.__context__
    return full


_DEVICE = (errno.EIO, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM)
"""Errors of a write the device or the directory refused (besides a full disk): the checkpoint's one line."""


def _device_error(e: BaseException) -> OSError | None:
    """The ``OSError`` of a write the device refused (``_DEVICE``) that ``e`` is, or was raised in the
    handling of (torch.save's RuntimeError holds it in its context); None for any other error (a bug:
    its traceback)."""
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        if isinstance(x, OSError) and x.errno in _DEVICE:
            return x
        x = x.__cause__ or x.__context__
    return None


def _write(directory: Path, tmp: Path, name: str, *, model: torch.nn.Module, tokenizer: Any | None,
           optimizer: torch.optim.Optimizer | Mapping[str, Any] | None, scheduler: Any | None, step: int,
           sampler_state: Mapping[str, Any] | None, extra: Mapping[str, Any] | None,
           rng: Mapping[str, Any] | None, chat: bool | None, beside: Sequence[str]) -> Path:
    """``save_checkpoint``'s writes: the checkpoint into ``tmp``, renamed to ``directory/name``, then ``latest``."""
    model_dir = tmp / "model"
    model_dir.mkdir(parents=True)
    model.save_pretrained(model_dir, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(model_dir)
    if chat is not None:
        from posttrain.policy import record_chat

        record_chat(model_dir, chat)
    with open(tmp / "state.pt", "wb") as f:  # a file object: a full disk's OSError stays in the error torch raises
        torch.save(
            {
                "format": FORMAT_VERSION,
                "optimizer": (optimizer.state_dict() if isinstance(optimizer, torch.optim.Optimizer)
                              else None if optimizer is None else dict(optimizer)),
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "rng": dict(rng) if rng is not None else rng_state(),
            },
            f,
        )
    meta = {
        "format": FORMAT_VERSION,
        "step": step,
        "sampler_state": dict(sampler_state or {}),
        "extra": dict(extra or {}),
    }
    try:
        (tmp / "state.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    except TypeError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ValueError(f"sampler_state and extra must be JSON-serializable: {e}") from e
    files = {
        str(p.relative_to(tmp)): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(tmp.rglob("*"))
        if p.is_file()
    }
    near = {n: {"size": (directory / n).stat().st_size, "sha256": _sha256(directory / n)} for n in beside}
    (tmp / MANIFEST).write_text(
        json.dumps({"format": FORMAT_VERSION, "files": files, **({"beside": near} if near else {})},
                   indent=1, sort_keys=True)
    )
    final = commit_dir(tmp, directory / name)  # re-saving a step (after a resume) replaces it whole
    _write_json_atomic(directory / LATEST, {"name": name, "step": step})
    return final


def save_beside(obj: Any, path: Path) -> None:
    """``torch.save(obj)`` into ``path`` as a checkpoint's files are written: into a temporary file
    beside it (``.NAME.tmp-<pid>``, those a killed save left removed first), fsynced, renamed over
    ``path``. A process killed at any moment leaves the old ``path`` (or none) or the new one, never
    a cut one; a full disk (or a write the device refused) is one ``CheckpointError`` naming ``path``,
    the temporary file removed and ``path`` as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.tmp-*"):
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:  # a file object: a full disk's OSError stays in the error torch raises
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)  # the rename itself survives a crash
    except Exception as e:
        tmp.unlink(missing_ok=True)
        full = disk_full_error(e)
        if (cause := full or _device_error(e)) is None:
            raise
        raise CheckpointError(f"{path}: {'no space left on the device' if full else 'cannot write'} while saving it "
                              f"({type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}); the "
                              f"half-written copy was removed and {path.name} is as it was: "
                              f"{'free space' if full else 'fix that'}, then --resume") from None


def commit_dir(tmp: str | Path, final: str | Path) -> Path:
    """Publish the fully written directory ``tmp`` as ``final`` in one rename, after an fsync.

    A process killed at any moment leaves either the old ``final`` (or none) or the new one, never a
    mix; an existing ``final`` is moved aside first and removed after the rename.
    """
    tmp, final = Path(tmp), Path(final)
    _fsync_tree(tmp)
    if final.exists():
        trash = final.with_name(f".tmp-old-{final.name}-{os.getpid()}")
        os.replace(final, trash)
        os.replace(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(final.parent)  # the rename itself survives a crash
    return final


def _prune(directory: Path, keep_last: int, *, keep: str) -> None:
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 or None, got {keep_last}")
    complete = sorted(p for p in directory.glob("step-*") if p.is_dir() and (p / MANIFEST).is_file())
    for old in complete[:-keep_last]:
        if old.name != keep:
            shutil.rmtree(old, ignore_errors=True)


def _verify(path: Path) -> dict[str, Any]:
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"checkpoint {path} is partial: {MANIFEST} is missing")
    try:
        manifest = json.loads(manifest_path.read_text())
        sizes = {str(rel): (int(want["size"]), str(want["sha256"])) for rel, want in manifest["files"].items()}
        near = {str(n): (int(want["size"]), str(want["sha256"])) for n, want in manifest.get("beside", {}).items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"checkpoint {path} is corrupt: {MANIFEST} is unreadable "
                              f"({type(e).__name__}: {e})") from None
    on_disk = {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()} - {MANIFEST}
    if unlisted := sorted(on_disk - sizes.keys()):
        raise CheckpointError(f"checkpoint {path} is corrupt: {unlisted[0]} is not in its {MANIFEST} (a file the "
                              "save did not write)")
    for rel in ("state.json", "state.pt"):
        if rel not in sizes:
            raise CheckpointError(f"checkpoint {path} is corrupt: its {MANIFEST} does not list {rel}")
    for rel, want in sizes.items():
        _check_file(path, path / rel, rel, *want)
    if bad := next((n for n in near if not _BESIDE.fullmatch(n)), None):
        raise CheckpointError(f"checkpoint {path} is corrupt: its {MANIFEST} lists {bad!r} beside it, not a file "
                              f"of {path.parent}")
    for name, want in near.items():
        _check_file(path, path.parent / name, f"{path.parent / name} (saved beside it)", *want)
    try:
        meta = json.loads((path / "state.json").read_text())
        int(meta["step"]), dict(meta["sampler_state"]), dict(meta["extra"])
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path} is corrupt: state.json ({type(e).__name__}: {e})") from None
    return meta


def _check_file(path: Path, p: Path, shown: str, size: int, sha: str) -> None:
    """The file ``p`` of checkpoint ``path`` is there with the size and sha256 its manifest gives."""
    if not p.is_file():
        raise CheckpointError(f"checkpoint {path} is partial: {shown} is missing")
    if p.stat().st_size != size:
        raise CheckpointError(f"checkpoint {path} is corrupt: {shown} has {p.stat().st_size} bytes, expected {size}")
    if _sha256(p) != sha:
        raise CheckpointError(f"checkpoint {path} is corrupt: {shown} does not match its sha256 in {MANIFEST}")


def _older_good(directory: Path, than: str) -> str:
    for p in sorted(directory.glob("step-*"), reverse=True):
        if p.name < than:
            try:
                _verify(p)
                return f"; the last good checkpoint is {p} (write its name {p.name} into {directory / LATEST} to resume from it)"
            except CheckpointError:
                continue
    return "; no older good checkpoint exists"


def _latest_name(pointer: Path) -> str:
    """The checkpoint ``latest`` names: JSON ``{"name": ...}`` or a bare ``step-N`` line, never a path
    (``checkpoint_name``, which ``posttrain tasks stats`` reads it with too)."""
    try:
        text = pointer.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{pointer} is unreadable ({type(e).__name__}: {e})") from None
    try:
        return checkpoint_name(text)
    except ValueError as e:
        raise CheckpointError(f"{pointer} {e}") from None


def load_latest(directory: str | Path) -> Checkpoint | None:
    """The verified checkpoint ``DIR/latest`` points to; None when ``DIR`` has no checkpoint yet.

    Raises ``CheckpointError`` when that checkpoint is corrupt or partial; the message names the
    last good one, which is left untouched.
    """
    directory = Path(directory)
    pointer = directory / LATEST
    if not pointer.exists():
        return None
    name = _latest_name(pointer)
    path = directory / name
    if not path.is_dir():
        raise CheckpointError(f"{pointer} names {name}, which does not exist" + _older_good(directory, name))
    try:
        meta = _verify(path)
    except CheckpointError as e:
        raise CheckpointError(str(e) + _older_good(directory, name)) from None
    return Checkpoint(
        path=path, step=int(meta["step"]), sampler_state=meta["sampler_state"], extra=meta["extra"]
    )


def load_weights(model: torch.nn.Module, model_dir: Path) -> None:
    """The weights of a checkpoint's ``model/`` into ``model`` (a peft model: its adapter's);
    ``CheckpointError`` naming the directory when they do not match."""
    from safetensors.torch import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{model_dir} holds no .safetensors file")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    if hasattr(model, "peft_config"):  # a peft model saves (and restores) only its adapter weights
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, state)
        return
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # shape mismatch
        raise CheckpointError(f"{model_dir} does not match the model: {str(e).splitlines()[-1].strip()}") from e
    tied = set()
    if getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        tied = {k for k in result.missing_keys if "lm_head" in k}
    missing = [k for k in result.missing_keys if k not in tied]
    if missing or result.unexpected_keys:
        raise CheckpointError(
            f"{model_dir} does not match the model: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}"
        )


def restore(
    ckpt: Checkpoint,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
) -> None:
    """Load weights, optimizer and scheduler states into live objects, then every RNG state."""
    load_weights(model, ckpt.model_dir)
    state = torch.load(ckpt.path / "state.pt", map_location="cpu", weights_only=True)
    if optimizer is not None:
        if state["optimizer"] is None:
            raise CheckpointError(f"{ckpt.path} was saved without an optimizer state")
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        if state["scheduler"] is None:
            raise CheckpointError(f"{ckpt.path} was saved without a scheduler state")
        scheduler.load_state_dict(state["scheduler"])
    set_rng_state(state["rng"])
