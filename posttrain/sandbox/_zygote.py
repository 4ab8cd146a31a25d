"""The fork-server that runs inside one sandbox slot (standard library only; not imported by posttrain).

bwrap starts it as pid 1 of the slot's pid namespace (``--as-pid-1``), under uid 65534, with
the seccomp filter loaded and the slot's cgroup limits applied. Being the namespace's init, it
cannot be killed by the jobs (the kernel drops SIGKILL/SIGSTOP sent to an init from inside its
namespace, and it installs no handlers for other signals). It is not dumpable, so jobs running
under the same uid cannot read its memory through /proc.

Loop: read a job frame on fd 10, write the job's files into a fresh /work/job, fork a child that
applies the per-job rlimits, raises its own oom_score_adj (so the OOM killer picks the job, not
this process), starts its own session and executes the source as ``__main__``; wait for it to
exit or for the deadline, SIGKILL every other process in the namespace and reap it; read the
job's stdout, stderr and fd-3 report up to the cap; wipe /work, /tmp and /dev/shm; reply on fd 11.

The job's stdin, stdout, stderr and fd 3 are memfds, not pipes: nothing has to be pumped while
it runs, so this process sleeps in one poll() per job instead of running a poll loop (each
page this process touches after a fork costs a fault; on a VM with nested paging the loop was
a tenth of a job's cost). Output past the cap is kept until the job ends (charged to the slot's
memory) and dropped then; a file-size rlimit bounds it, so a job that floods stdout is stopped
by SIGXFSZ at ``Limits.file_size_mb``.
"""

import ctypes
import gc
import os
import resource
import select
import signal
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pump import PRELOAD, FrameError, recv_frame, send_frame, wait_for  # noqa: E402

REQ, REP = 10, 11
WIPE = ("/work", "/tmp", "/dev/shm")
PR_SET_DUMPABLE = 4
# prctl with its argument types bound and no errno swapping: the call a child makes costs a
# fraction of an unbound ctypes call, whose conversion machinery each child would page in.
_prctl = ctypes.CDLL(None).prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int

# Warm the interpreter: the modules typical test code imports (PRELOAD), and the compiler (the
# first compile() after a fork costs ~1.5 ms otherwise: shared/reference/sandbox.md B.9).
for _name in PRELOAD:
    try:
        __import__(_name)
    except ImportError:
        pass
import atexit  # noqa: E402
import builtins  # noqa: E402
import io  # noqa: E402
import traceback  # noqa: E402

compile("def f(x):\n    return [i for i in range(x)]\nassert f(3) == [0, 1, 2]\n", "warm", "exec")

# The job's text streams, built once: they name fds 0-2, which the child points at its stdin,
# stdout and stderr, so each child inherits ready objects instead of allocating (and
# page-faulting in) new ones.
_STDIN = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)), errors="surrogateescape")
_STDOUT = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "wb", closefd=False)), errors="surrogateescape")
_STDERR = io.TextIOWrapper(
    io.BufferedWriter(io.FileIO(2, "wb", closefd=False)), errors="backslashreplace", line_buffering=True
)


def _others() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]


def _has_children() -> bool:
    """True while a process other than this one exists in the namespace (reaping zombies).

    This process is the namespace's init, so once a job's first process is reaped every other
    process of the job is a descendant of this one: no children means nobody else is left.
    """
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def sweep() -> None:
    """SIGKILL and reap every process in the namespace except this one."""
    if not _has_children():
        return
    for _ in range(10000):
        pids = _others()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.0002)
                break


def _rm(path: str) -> None:
    """Remove a tree the job may have chmod-ed to 000 (same uid: chmod back first)."""
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        if st.st_mode & 0o700 != 0o700:
            os.chmod(path, 0o700)
        for name in os.listdir(path):
            _rm(os.path.join(path, name))
        os.rmdir(path)
    else:
        os.unlink(path)


def wipe() -> bool:
    """Empty the writable places; True when they are empty afterwards (else the slot is recycled)."""
    try:
        for top in WIPE:  # every process of the job is dead by now, so nothing re-creates entries
            for name in os.listdir(top):
                _rm(os.path.join(top, name))
        for kind in ("shm", "sem", "msg"):  # SysV IPC objects would outlive the job in this ipc ns
            fd = os.open(f"/proc/sysvipc/{kind}", os.O_RDONLY)
            try:
                if os.read(fd, 65536).count(b"\n") > 1:  # a header line, then one line per object
                    return False
            finally:
                os.close(fd)
    except (OSError, RecursionError):
        return False
    return True


def write_files(names: list[str], blobs: list[bytes]) -> None:
    for name, data in zip(names, blobs, strict=True):
        path = os.path.join("/work/job", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def child(source: bytes, fds: tuple[int, int, int, int], job: dict) -> None:
    """In the forked child: never returns."""
    code = 1
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(4, 65536)
        _prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        try:  # the OOM killer must pick the job's processes, never this slot's fork-server
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(fd, b"1000")
            os.close(fd)
        except OSError:
            pass
        cpu = int(job["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (job["fsize"], job["fsize"]))
        resource.setrlimit(resource.RLIMIT_NOFILE, (job["nofile"], job["nofile"]))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir("/work/job")
        sys.stdin, sys.stdout, sys.stderr = _STDIN, _STDOUT, _STDERR
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        sys.argv = ["main.py"]
        sys.path[0] = "/work/job"
        g = {"__name__": "__main__", "__builtins__": builtins, "__file__": "/work/job/main.py"}
        try:
            exec(compile(source, "main.py", "exec"), g)
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            e = sys.exc_info()[1]
            tb = e.__traceback__.tb_next if e.__traceback__ else None  # hide this frame of the zygote
            traceback.print_exception(type(e), e, tb)
            code = 1
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            code = 120
    finally:
        os._exit(code & 0xFF)


def run_job(header: dict, blobs: list[bytes]) -> tuple[dict, list[bytes]]:
    source, stdin_data, files = blobs[0], blobs[1], blobs[2:]
    os.mkdir("/work/job")
    write_files(header["files"], files)
    fds = [os.memfd_create(name, os.MFD_CLOEXEC) for name in ("stdin", "stdout", "stderr", "report")]
    try:
        if stdin_data:
            view = memoryview(stdin_data)
            while view:
                view = view[os.write(fds[0], view) :]
            os.lseek(fds[0], 0, os.SEEK_SET)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            child(source, (fds[0], fds[1], fds[2], fds[3]), header)
        pidfd = os.pidfd_open(pid)
        try:
            timed_out = not wait_for(pidfd, select.POLLIN, header["timeout"])
            if timed_out:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            _, st, ru = os.wait4(pid, 0)
        finally:
            os.close(pidfd)
        duration = time.monotonic() - start
        sweep()  # now nothing can write to the outputs any more
        cap = header["cap"]
        sizes = [os.fstat(fd).st_size for fd in fds[1:]]
        out = [os.pread(fd, min(n, cap), 0) if n and cap else b"" for fd, n in zip(fds[1:], sizes, strict=True)]
    finally:
        for fd in fds:
            os.close(fd)
    reply = {
        "exit_code": os.WEXITSTATUS(st) if os.WIFEXITED(st) else None,
        "signal": os.WTERMSIG(st) if os.WIFSIGNALED(st) else None,
        "timed_out": timed_out,
        "duration_s": duration,
        "maxrss": ru.ru_maxrss * 1024,
        "stdout_truncated": sizes[0] > cap,
        "stderr_truncated": sizes[1] > cap,
        "report_truncated": sizes[2] > cap,
        "report_written": sizes[2] > 0,
    }
    return reply, out


def main() -> None:
    os.dup2(0, REQ)
    os.dup2(1, REP)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_DUMPABLE, 0) failed")
    gc.collect()
    gc.freeze()
    send_frame(
        REP, {"ready": True, "pid": os.getpid(), "python": sys.version.split()[0], "clean": wipe()}, []
    )
    while True:
        try:
            header, blobs = recv_frame(REQ)
        except FrameError:
            return
        try:
            reply, out = run_job(header, blobs)
        except Exception as e:  # a zygote failure: reported as such, never as the program's result
            sweep()
            reply, out = {"zygote_error": f"{type(e).__name__}: {e}"}, []
        reply["clean"] = wipe() and not _has_children()  # else the host restarts this slot
        send_frame(REP, reply, out)


if __name__ == "__main__":
    main()
