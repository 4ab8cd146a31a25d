"""What the code runner restores between candidates: the cell emptied, files, IPC, sockets, limits.

Part of the runner that runs inside the sandbox (``_runner.py``). Processes are killed by cgroup
(``Cell``), never by a list of pids a candidate could hide from.
"""

import os
import socket
import time

from posttrain.envs.code._runner_procs import _kill, _stat, _state, attributes, libc

WRITABLE = ("/work", "/tmp", "/dev/shm")
EXIT_WAIT_S = 10.0  # past the kill's deadline, how long a cell whose every thread is exiting is waited for
_PF_EXITING = 0x4


class Cell:
    """The sandbox's cell (``posttrain/sandbox/_cgroup.py`` ``Cell``): a cgroup that every server
    moves itself into before any model code runs, and that the runner kills by, so that whatever a
    candidate started (a helper whose main thread exited while another thread runs, shown as a
    zombie; a double fork; a process in another session) dies before the next candidate starts.
    No process of the cell can leave it: only the fds the host opened can move a process, and no
    server keeps them."""

    def __init__(self, version, procs, control, census):
        self.version, self.procs, self.control, self.census = version, procs, control, census

    @staticmethod
    def given():
        """The cell the sandbox handed this job (fd 4 describes it); RuntimeError if none."""
        import json

        try:
            desc = json.loads(os.pread(4, 65536, 0))
            os.close(4)
            procs, control, census = desc["cells"][0]
            return Cell(int(desc["cgroup"]), procs, control, census)
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            raise RuntimeError(f"the sandbox gave the runner no cell to put candidates in ({e})") from None

    def _tasks(self):
        """v1: every live thread in the cell (a thread group counts while any of its threads
        lives; zombies, reaped at once by the template, do not). Reopened per read: the kernel
        keeps a v1 task list per open file."""
        fd = os.open(f"/proc/self/fd/{self.census}", os.O_RDONLY)
        try:
            tids = [int(t) for t in os.read(fd, 1 << 20).split()]
        finally:
            os.close(fd)
        return [t for t in tids if _state(t) not in ("", "Z", "X")]

    def empty(self):
        if self.version == 2:
            return b"populated 0" in os.pread(self.census, 4096, 0)
        return not self._tasks()

    def exiting(self):
        """Whether everything still in the cell is on its way out: v2, always once ``cgroup.kill``
        was written (the kernel killed the subtree); v1, every thread exiting (``PF_EXITING``: its
        exit runs, freeing a large memory takes a while on a CPU others hold) or with a SIGKILL
        pending (taken when it next runs)."""
        return self.version == 2 or all(map(_dying, self._tasks()))

    def kill(self, killed=(), deadline_s=5.0):
        """Kill everything in the cell and wait until nothing in it lives; False if that fails:
        something not yet exiting is there past ``deadline_s``, or something exiting is still there
        ``EXIT_WAIT_S`` later (an honest candidate's exit slowed by the host's load is no sabotage).
        ``killed``: pids already sent SIGKILL (the server). When nothing else is in the cell (an
        honest candidate), waiting for those to exit is enough; else v1 freezes the cell (nothing
        forks meanwhile), SIGKILLs every thread, thaws it; v2 writes ``cgroup.kill``."""
        end = time.monotonic() + deadline_s
        try:
            if self.version == 1 and killed and set(self._tasks()) <= set(killed):
                _wait_exit(killed, end)
                if self.empty():
                    return True
            if self.version == 2:
                os.write(self.control, b"1")
            else:
                os.write(self.control, b"FROZEN")
                while os.pread(self.control, 64, 0).strip() != b"FROZEN" and time.monotonic() < end:
                    time.sleep(0.0001)
                try:
                    for tid in self._tasks():
                        _kill(tid)
                finally:
                    os.write(self.control, b"THAWED")
            while not self.empty():
                now = time.monotonic()
                if now > end and (now > end + EXIT_WAIT_S or not self.exiting()):
                    return False
                _wait_census(self, 0.01)
        except OSError:
            return False
        return True


def _dying(tid):
    """``tid`` is exiting, has a SIGKILL pending (its own or its process's), or is gone."""
    fields = _stat(tid)
    try:
        if not fields or int(fields[6]) & _PF_EXITING:
            return True
        with open(f"/proc/{tid}/status", "rb") as f:
            pending = [int(line.split()[1], 16) for line in f if line.startswith((b"SigPnd:", b"ShdPnd:"))]
    except FileNotFoundError:
        return True
    except (OSError, IndexError, ValueError):
        return False
    return any(p & (1 << (9 - 1)) for p in pending)


def _wait_exit(pids, end):
    """Wait (by pidfd, not by polling) until every process of ``pids`` has exited, or ``end``."""
    import select

    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone already
            continue
        try:
            select.select([fd], [], [], max(0.0, end - time.monotonic()))
        finally:
            os.close(fd)


def _wait_census(cell, timeout):
    """v2: until ``cgroup.events`` changes (POLLPRI), at most ``timeout`` s; v1: a short sleep."""
    if cell.version != 2:
        time.sleep(0.0002)
        return
    import select

    poller = select.poll()
    poller.register(cell.census, select.POLLPRI)
    poller.poll(int(timeout * 1000))


def tree():
    """Every path under the writable places (not following symlinks)."""
    out, todo = set(), list(WRITABLE)
    while todo:
        d = todo.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            out.add(e.path)
            if e.is_dir(follow_symlinks=False):
                todo.append(e.path)
    return out


def wipe(keep):
    """Remove every path under the writable places that is not in ``keep``; False on failure."""
    todo = list(WRITABLE)
    while todo:
        d = todo.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            return False
        for e in entries:
            if e.path not in keep:
                if not _remove(e.path):
                    return False
            elif e.is_dir(follow_symlinks=False):
                todo.append(e.path)
    return True


def _remove(path):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            for entry in os.scandir(path):
                if not _remove(entry.path):
                    return False
            os.rmdir(path)
        else:
            os.unlink(path)
    except (OSError, RecursionError):
        return False
    return True


_IPC = (("shm", "shmctl"), ("sem", "semctl"), ("msg", "msgctl"))


def _ipc_ids():
    out = []
    for kind, fn in _IPC:
        with open(f"/proc/sysvipc/{kind}") as f:
            out += [(fn, int(line.split()[1])) for line in f.read().splitlines()[1:] if line.strip()]
    return out


def clear_ipc():
    """Remove every SysV IPC object (they outlive their creator); True once none is left."""
    try:
        ids = _ipc_ids()
        if ids:
            for fn, ident in ids:
                if fn == "semctl":
                    libc(fn, ident, 0, 0)  # IPC_RMID
                else:
                    libc(fn, ident, 0, None)
        for _ in range(1000):  # a removed segment lives until its last (dying) user detaches
            if not _ipc_ids():
                return True
            time.sleep(0.001)
    except Exception:  # noqa: BLE001 - OSError, ValueError, a missing symbol, ...
        pass
    return False


def socket_inodes():
    """The inodes of the unix sockets of this network namespace (the sandbox's: its runner's and its
    candidates')."""
    with open("/proc/net/unix") as f:
        return {line.split()[6] for line in f.read().splitlines()[1:] if len(line.split()) > 6}


SOCKETS_WAIT_S = 3.0
"""How long the kernel's collector may take to free a candidate's sockets in flight (milliseconds on
an idle host; 500 polls of 1 ms were once too few under load: a socket-table fixture's item came back
``sabotage`` instead of ``stateful``, 0 of 8 on repeat)."""


def clear_sockets(kept):
    """True once no unix socket is left but ``kept`` (the runner's own, at the job's start). A
    candidate's sockets close with its processes, except those in flight in a cycle, which wait for
    the kernel's collector: a listening abstract socket sent in one outlived the candidate into the
    replay, its name (``@tbl-<arg>-<answer>``, listed in /proc/net/unix) a table of the answers its
    first run gave by call count (pass 1.0, 3 of 3). A socket of the runner's own put in flight and
    closed runs the collector, which takes the candidate's cycles too; then they are waited for."""
    try:
        if socket_inodes() <= kept:
            return True
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            socket.send_fds(a, [b"x"], [b.fileno()])
        finally:
            a.close()
            b.close()
        end = time.monotonic() + SOCKETS_WAIT_S
        while time.monotonic() < end:
            if socket_inodes() <= kept:
                return True
            time.sleep(0.001)
    except Exception:  # noqa: BLE001 - OSError, ValueError, a /proc line of another shape, ...
        pass
    return False


def meta(path):
    """What a candidate could change about a path that outlives it, to carry state to the next
    run: mode, ``user.*`` extended attributes and, for a regular file, its size and content. (Times
    are restored, not compared: a directory's times change with every file made in it.)"""
    import stat

    st = os.lstat(path)
    xattrs = {}
    if not stat.S_ISLNK(st.st_mode):
        for name in os.listxattr(path, follow_symlinks=False):
            if name.startswith("user."):
                xattrs[name] = os.getxattr(path, name, follow_symlinks=False)
    content = None
    if stat.S_ISREG(st.st_mode):
        import hashlib

        with open(path, "rb") as f:
            content = (st.st_size, hashlib.sha256(f.read()).digest())
    return (st.st_mode, tuple(sorted(xattrs.items())), content), (st.st_atime_ns, st.st_mtime_ns)


def restore_meta(saved):
    """Put back the mode and ``user.*`` xattrs of every kept directory and the times of every kept
    path; True when each kept path is then as it was at the job's start."""
    import stat

    try:
        for path, (state, times) in saved.items():
            mode, xattrs, _ = state
            if stat.S_ISDIR(mode) and meta(path)[0] != state:
                os.chmod(path, stat.S_IMODE(mode))
                want = dict(xattrs)
                for name in os.listxattr(path, follow_symlinks=False):
                    if name.startswith("user.") and name not in want:
                        os.removexattr(path, name, follow_symlinks=False)
                for name, value in want.items():
                    os.setxattr(path, name, value, follow_symlinks=False)
            if meta(path)[0] != state:
                return False  # a kept file's content, mode or xattrs changed: state for the next run
            if not stat.S_ISLNK(mode):
                os.utime(path, ns=times, follow_symlinks=False)
    except (OSError, ValueError):
        return False
    return True


class Job:
    """What the runner restores between candidates and checks before trusting a fresh server."""

    def __init__(self, keep, files, cell):
        self.keep, self.files, self.cell, self.attrs, self.meta = keep, files, cell, None, None
        self.sockets = frozenset()

    def snapshot(self):
        self.attrs = {pid: attributes(pid) for pid in self.keep if pid != 1}
        self.sockets = frozenset(socket_inodes())
        self.meta = {}
        for path in (*WRITABLE, *sorted(self.files)):
            try:
                self.meta[path] = meta(path)
            except OSError:
                pass

    def clean(self, killed=()):
        """(``killed``: the pids already sent SIGKILL: the last server.) Nothing alive in the cell, the writable places as they were (entries, and the mode,
        xattrs and times of what was there at the start), no IPC object, no unix socket but the runner's
        own, no changed limits: True. Else False (the caller decides whose failure that is)."""
        ok = (self.cell.kill(killed) and wipe(self.files) and clear_ipc() and clear_sockets(self.sockets)
              and restore_meta(self.meta or {}))
        return ok and all(attributes(pid) == attrs for pid, attrs in (self.attrs or {}).items())
