"""Errors a user caused: bad config, bad task file, missing file. The CLI prints them in one line
and exits 2. Each message names the file, field or value and what was expected.

A message is kept whole (never cut off) but always on one line: line breaks that a library's own
message carries (YAML, JSON Schema) become spaces.
"""

import re
from pathlib import Path


class UserError(Exception):
    """Bad input from the user: printed as one line, exit code 2, nothing written is lost."""

    def __init__(self, message: str = "", *args: object) -> None:
        super().__init__(re.sub(r"\s*\n\s*", " ", str(message)).strip(), *args)


class ConfigError(UserError):
    """A recipe key is unknown, has the wrong type, or makes an invalid combination."""


class TaskError(UserError):
    """A task file or record does not match its domain's schema."""


class RunFailure(RuntimeError):
    """A run failed at run time, not by bad input (a data-parallel rank that died): printed as one
    line, exit code 1; the run directory keeps what was done, for ``--resume``."""

    def __init__(self, message: str = "", *args: object) -> None:
        super().__init__(re.sub(r"\s*\n\s*", " ", str(message)).strip(), *args)


def refuse_directory(path: str | Path, expected: str) -> None:
    """Raise ``UserError`` when ``path`` is a directory where a file was asked for (before the caller's
    "not found", which would be wrong about it): ``expected`` names the file, e.g. "a task file"."""
    if Path(path).is_dir():
        raise UserError(f"{path}: is a directory, expected {expected}")


def user_path(path: str | Path, what: str) -> Path:
    """``path`` with ``~`` and ``~user`` expanded; ``UserError`` naming ``what`` (a flag or key) when the
    user has no home directory here (``Path.expanduser`` raises ``RuntimeError``: a traceback before).

    >>> user_path("/tmp/x", "--model").name
    'x'
    """
    try:
        return Path(path).expanduser()
    except RuntimeError:
        raise UserError(f"{what}: {str(path)!r}: no home directory for {str(path).split('/')[0]!r}") from None
