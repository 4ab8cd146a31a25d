"""Delete what a job wrote, whatever it wrote: no recursion, two fds, never raises.

Imported by the host (``_pool.py``, ``workspace.py``) and by the fork-server inside the sandbox
(``_zygote.py``, bind-mounted read-only), so standard library only.

A job controls the shape of what it leaves: a directory chain deeper than Python's recursion
limit (``shutil.rmtree`` then raises ``RecursionError``, not ``OSError``), paths longer than
PATH_MAX, directories chmod-ed to 000. ``empty_dir`` therefore works one level at a time through
directory fds: it empties each subdirectory of the top, hoisting *its* subdirectories up into the
top under fresh names (a rename within one file system), so depth never matters and at most two
directories are open at once. It never crosses into another file system (a mount point is left
alone and reported as not emptied).
"""

from __future__ import annotations

import os
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(name: str, dir_fd: int | None = None) -> int:
    """Open a directory the caller owns even when its mode denies it (chmod it to u+rwx first)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            raise
        os.chmod(name, stat.S_IMODE(st.st_mode) | 0o700, dir_fd=dir_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _writable(fd: int) -> None:
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    if mode & 0o700 != 0o700:
        os.fchmod(fd, mode | 0o700)


def _empty_one(top: int, name: str, dev: int, serial: list[int]) -> None:
    """Delete the directory ``name`` in ``top``: files go, subdirectories move up into ``top``."""
    sub = _open_dir(name, top)
    try:
        if os.fstat(sub).st_dev != dev:
            raise OSError(f"{name}: another file system is mounted here")
        _writable(sub)
        for child in os.listdir(sub):
            st = os.stat(child, dir_fd=sub, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(child, dir_fd=sub)
                continue
            while True:  # a fresh name in top; a name the job chose there is skipped, not replaced
                serial[0] += 1
                try:
                    os.rename(child, f".posttrain-rm-{serial[0]}", src_dir_fd=sub, dst_dir_fd=top)
                    break
                except (FileExistsError, IsADirectoryError, NotADirectoryError):
                    continue
                except OSError as e:
                    if e.errno != 39:  # ENOTEMPTY: the name is taken by a non-empty directory
                        raise
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=top)


def empty_dir(path: str | os.PathLike) -> bool:
    """Delete everything inside the directory ``path`` (kept). True when it is empty afterwards.

    Never raises: an entry that cannot be deleted is skipped and the answer is False.
    """
    try:
        top = _open_dir(os.fspath(path))
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        return empty_dir_fd(top)
    finally:
        os.close(top)


def empty_dir_fd(top: int) -> bool:
    """``empty_dir`` for a directory the caller has open (and keeps open)."""
    try:
        st = os.fstat(top)
        dev = st.st_dev
        if stat.S_IMODE(st.st_mode) & 0o700 != 0o700:
            os.fchmod(top, stat.S_IMODE(st.st_mode) | 0o700)
        serial = [0]
        failed: set[str] = set()
        while True:
            names = [n for n in os.listdir(top) if n not in failed]
            if not names:
                return not failed
            for name in names:
                try:
                    st = os.stat(name, dir_fd=top, follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        _empty_one(top, name, dev, serial)
                    else:
                        os.unlink(name, dir_fd=top)
                except FileNotFoundError:
                    continue
                except OSError:
                    failed.add(name)
    except (OSError, ValueError):
        return False


def remove_tree(path: str | os.PathLike) -> bool:
    """Delete ``path`` and everything below it (a file or a directory); True when it is gone.

    Never raises. Never follows a symlink and never enters another mounted file system.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        if stat.S_ISDIR(st.st_mode):
            if not empty_dir(path):
                return False
            os.rmdir(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True
