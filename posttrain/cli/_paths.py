"""Output paths the commands take (``--out``): ``posttrain.config``'s checks, and a symbolic link to
nothing or a loop refused by name. Such a link ``exists()`` not, so the checks saw a directory to
make, and the command failed where it made it (``eval --out`` after all its work: FileExistsError's
traceback, the evaluation lost)."""

from pathlib import Path

from posttrain import config
from posttrain.errors import UserError


def refuse_dangling_link(path: str | Path, what: str) -> None:
    """``UserError`` when ``path`` is a symbolic link that leads nowhere (to nothing, or a loop)."""
    p = Path(path)
    if p.is_symlink() and not p.exists():
        raise UserError(f"{what} {p}: a symbolic link to nothing (or a loop); expected a directory or a name "
                        f"to create")


def check_out_dir(path: str | Path, what: str = "--out") -> Path:
    """``posttrain.config.check_out_dir``, after ``refuse_dangling_link``."""
    refuse_dangling_link(path, what)
    return config.check_out_dir(path, what)


def check_out_file(path: str | Path, what: str = "--out") -> Path:
    """``posttrain.config.check_out_file``, after ``refuse_dangling_link``."""
    refuse_dangling_link(path, what)
    return config.check_out_file(path, what)
