"""The fork-server that runs inside one sandbox slot (standard library only; not imported by posttrain).

bwrap starts it as pid 1 of the slot's pid namespace (``--as-pid-1``), under uid 65534, with
the seccomp filter loaded and the slot's cgroup limits applied. Being the namespace's init, it
cannot be killed by the jobs (the kernel drops SIGKILL/SIGSTOP sent to an init from inside its
namespace, and it installs no handlers for other signals). It is not dumpable, so jobs running
under the same uid cannot read its memory or fds through /proc; seccomp refuses jobs the
syscalls that change another process of the same uid (prlimit, setpriority, sched_set*,
ioprio_set on a pid other than 0), and before each fork it checks its own rlimits, nice value,
CPU affinity and scheduler against what it started with, and resets them.

Loop: receive a job on fd 10 (a SOCK_SEQPACKET socket): a small header of numbers and six
memfds made by the host -- source, files, stdin, stdout, stderr, report. It
never reads any of them: the child it forks reads its own program and writes its own files, and
the host reads the outputs. So a job is forked from a state that holds no other job's data and
none of its own stdin: there is nothing to find by walking frames, ``gc.get_objects()`` or the
heap but this file's code and the numbers of job headers and replies. The child applies the
per-job rlimits, raises its own oom_score_adj (so the OOM killer picks the job, not this
process), starts its own session and executes the source as ``__main__``; the server waits for
it to exit or for the deadline (or until it stays stopped: ``wait_unless_stopped``), SIGKILLs and
reaps every other process in the namespace and unlinks the POSIX message queues; then it replies
with the exit status and whether the slot is clean (else the host restarts it). /work, /tmp and
/dev/shm need no wipe: the host unmounts the job's file systems there and mounts new ones before the
next job (``_fs.py``), so this process never touches them but to make /work/job. A failure after
the fork is the job's doing and is replied as such (``slot_error``); one before it is the slot's
(``zygote_error``).

Cells (``_cgroup.Cell``): the host passes this process the fds of the slot's cells at start (its
argv says which); a job whose header asks for ``cells`` gets them at fds 5.. with a JSON
description at fd 4; every other job closes them before its code runs. After a job, the cells
are thawed (a frozen process would survive the sweep) before the sweep.

The job's stdin, stdout, stderr and fd 3 are memfds, not pipes: nothing has to be pumped while
it runs, so this process sleeps in one poll() per job (each page this process touches after a
fork costs a fault; on a VM with nested paging a poll loop was a tenth of a job's cost). Output
is bounded by a file-size rlimit: a job that floods stdout is stopped by SIGXFSZ at
``Limits.file_size_mb``.
"""

import ctypes
import gc
import json
import os
import resource
import select
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pump import PRELOAD, longest_wait, proc_sched, proc_state, recv_frame, wait_for  # noqa: E402

CHANNEL = 10
CELLS_AT = 200  # where this process keeps the cells' fds (clear of the fds jobs arrive with)
MQUEUE = "/dev/mqueue"  # POSIX message queues of this ipc namespace (bwrap --mqueue)
PR_SET_DUMPABLE = 4
DEATH_WAIT_S = 1.0  # how long a timed-out job's runnable processes get to stop before they are measured
STOP_TICK_S = 0.25  # how often a running job's main process is checked for being stopped
STOP_CPU_S = 0.1  # CPU its processes may use, once it is seen stopped, before the job is ended
SOCKETS_GC_S = 0.5  # how long the kernel's collector gets to take a job's sockets in flight (``collect_sockets``)
# prctl with its argument types bound and no errno swapping: the call a child makes costs a
# fraction of an unbound ctypes call, whose conversion machinery each child would page in.
_prctl = ctypes.CDLL(None).prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int
_mq_unlink = ctypes.CDLL(None).mq_unlink  # /dev/mqueue is mounted read-only (``_launch.bwrap_args``)
_mq_unlink.argtypes = [ctypes.c_char_p]
_mq_unlink.restype = ctypes.c_int

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

# ------------------------------------------------------------------ this process's own state

_RLIMITS = sorted(getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_"))


def own_state() -> dict:
    """What a process of the same uid could change about this one if seccomp let it. (Its I/O
    priority is left to seccomp alone: reading it would cost a ctypes call per job.)"""
    return {
        "rlimits": [resource.getrlimit(r) for r in _RLIMITS],
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "affinity": sorted(os.sched_getaffinity(0)),
        "scheduler": (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority),
    }


def restore_state(base: dict) -> str | None:
    """Reset this process's rlimits, nice, affinity and scheduler to ``base``;
    None when they match it afterwards, else what differs."""
    now = own_state()
    if now == base:
        return None
    for r, want, have in zip(_RLIMITS, base["rlimits"], now["rlimits"], strict=True):
        if want != have:
            try:
                resource.setrlimit(r, want)
            except (OSError, ValueError):
                pass
    try:
        if now["nice"] != base["nice"]:
            os.setpriority(os.PRIO_PROCESS, 0, base["nice"])
        if now["affinity"] != base["affinity"]:
            os.sched_setaffinity(0, base["affinity"])
        if now["scheduler"] != base["scheduler"]:
            os.sched_setscheduler(0, base["scheduler"][0], os.sched_param(base["scheduler"][1]))
    except OSError:
        pass
    after = own_state()
    bad = [k for k in base if after[k] != base[k]]
    return f"the fork-server's {', '.join(bad)} changed and cannot be reset" if bad else None


# ------------------------------------------------------------------ what a job may leave


def _sysv_objects_left() -> bool:
    for kind in ("shm", "sem", "msg"):  # SysV IPC objects would outlive the job in this ipc ns
        fd = os.open(f"/proc/sysvipc/{kind}", os.O_RDONLY)
        try:
            if os.read(fd, 65536).count(b"\n") > 1:  # a header line, then one line per object
                return True
        finally:
            os.close(fd)
    return False


def _sockets_left() -> bool:
    """Whether a unix socket is left in this network namespace (this process has none in it)."""
    fd = os.open("/proc/net/unix", os.O_RDONLY)
    try:
        return os.read(fd, 4096).count(b"\n") > 1  # a header line, then one line per socket
    finally:
        os.close(fd)


def collect_sockets() -> bool:
    """Whether no unix socket of a job is left. A job's sockets close with its processes, but those
    in flight in a cycle wait for the kernel's collector, which does not always run at once: a
    listening abstract socket sent with ``MSG_OOB`` in a cycle kept its name into the next job
    (``bind`` of it: EADDRINUSE; its name, any bytes, in /proc/net/unix), and so did what else was
    in flight with it (128 inotify instances: the next job's ``inotify_init`` failed, EMFILE, the
    slot's uid having no more). A socket of this process's own put in flight and closed runs the
    collector, which takes the job's cycles too (a few ms); then wait for them, ``SOCKETS_GC_S``."""
    if not _sockets_left():
        return True
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        socket.send_fds(a, [b"x"], [b.fileno()])
    finally:
        a.close()
        b.close()
    end = time.monotonic() + SOCKETS_GC_S
    while time.monotonic() < end:
        if not _sockets_left():
            return True
        time.sleep(0.002)
    return False


def leftovers() -> str | None:
    """Unlink the message queues and collect the job's sockets in flight; None when no IPC object
    or unix socket is left (else the host restarts the slot: a new network namespace), or what is.
    (The file systems are the host's to replace.)"""
    try:
        if os.path.isdir(MQUEUE):  # (its directory's ctime does not follow its queues: list it)
            for name in os.listdir(MQUEUE):
                _mq_unlink(b"/" + os.fsencode(name))
            if os.listdir(MQUEUE):
                return "POSIX message queues are left"
        if _sysv_objects_left():
            return "SysV IPC objects are left"
        if not collect_sockets():
            return "unix sockets are left"
    except (OSError, ValueError) as e:
        return f"cleanup failed: {e}"
    return None


# ------------------------------------------------------------------ processes

_reaped_cpu = [0.0]  # CPU seconds of the processes reaped since the last job started


def _reap(flags: int) -> int:
    """wait4 any child; its pid (0: none exited yet, -1: no children), CPU time accumulated."""
    try:
        pid, _, ru = os.wait4(-1, flags)
    except ChildProcessError:
        return -1
    if pid:
        _reaped_cpu[0] += ru.ru_utime + ru.ru_stime
    return pid


def _others() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]


def _has_children() -> bool:
    """True while a process other than this one exists in the namespace (reaping zombies).

    This process is the namespace's init, so once a job's first process is reaped every other
    process of the job is a descendant of this one: no children means nobody else is left.
    """
    while True:
        pid = _reap(os.WNOHANG)
        if pid == -1:
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
            pid = _reap(os.WNOHANG)
            if pid == -1:
                break
            if pid == 0:
                time.sleep(0.0002)
                break


def _threads() -> list[int]:
    """Every thread of every process in the namespace but this one (/proc/<tid> reads a thread's
    own state and CPU wait; /proc/<pid> only its main thread's)."""
    tids = []
    for pid in _others():
        try:
            tids.extend(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return tids


def _signal(send, target: int, sig: int) -> None:
    try:
        send(target, sig)
    except OSError:
        pass


def kill_measured() -> tuple[float, float, bool]:
    """Stop a timed-out job, measure it, then kill it: of its process that waited for a CPU the
    longest (as ``_pump.longest_wait`` picks it), how long it waited and lived, and whether it
    lowered its own priority (``_starve.maybe_starved``).

    The kernel adds a runnable process's current wait to its ``run_delay`` only when it next gets a
    CPU. Under hogs that starve it, that is every few hundred ms, so read alive the spinner of a
    starved job showed a quarter to a half of its wait and the job was not judged starved. So every
    process of the job is stopped (SIGSTOP: it cannot be caught, and a runnable process stops only
    once it gets a CPU, which counts its last wait) and read once none is runnable, for at most
    ``DEATH_WAIT_S``; then all are killed. (Killed before they were read, a dying parent that was
    waiting for its child reaped it if the child died first, the kernel's wait4 reaping a zombie
    child with SIGKILL already pending, and the child's wait went with it: the job read as one
    that slept, and a job the host starved had timed out on its own: 4 runs of 74 under nice -20
    hogs. A stopped parent reaps nothing, and a stopped child is no zombie to reap.)

    Each round stops the whole namespace again, at once (``kill(-1)`` from its init: every process
    of it but this one, none forked in between): stopped once each, a job whose escaped processes
    SIGCONT everything in a loop had some continued after their stop, and they ran on for the whole
    ``DEATH_WAIT_S`` (3 runs of 20). Each thread is read (its state and its wait): SIGSTOP stops
    every thread, but a process's own /proc entries are its main thread's, so a job whose work ran
    in threads beside a main thread in join() was read as one that slept (0.003-0.026 s of wait,
    each thread 0.84-0.89 s, four threads on one CPU for 1 s). Not covered: a thread whose wait is
    still running when ``DEATH_WAIT_S`` ends is read without it.
    """
    end = time.monotonic() + DEATH_WAIT_S
    while True:
        _signal(os.kill, -1, signal.SIGSTOP)  # all of the namespace at once, again each round
        if time.monotonic() >= end or not any(proc_state(t) == b"R" for t in _threads()):
            break
        time.sleep(0.005)
    with open("/proc/uptime", "rb") as f:
        now = float(f.read().split()[0])
    waits = []
    for other in _threads():
        try:
            waits.append(proc_sched(other, now, BASE["nice"], BASE["scheduler"][0])[:3])
        except (OSError, ValueError, IndexError):
            continue
    _signal(os.kill, -1, signal.SIGKILL)  # all of it at once (finish_job's sweep reaps them)
    return longest_wait(waits)


# ------------------------------------------------------------------ one job


def write_files(names: list[str], blobs: list[bytes]) -> None:
    for name, data in zip(names, blobs, strict=True):
        path = os.path.join("/work/job", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def child(program: list[int], stdio: list[int], job: dict) -> None:
    """In the forked child: never returns."""
    code = 1
    try:
        os.setsid()
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        _prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        try:  # the OOM killer must pick the job's processes, never this slot's fork-server
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(fd, b"1000")
            os.close(fd)
        except OSError:
            pass
        sys.stdin, sys.stdout, sys.stderr = _STDIN, _STDOUT, _STDERR
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        try:  # the job's own program and files, read only now, in the job's own process
            source = os.pread(program[0], os.fstat(program[0]).st_size, 0)
            if job["n_files"]:
                header, blobs = recv_frame(program[1])
                write_files(header["files"], blobs)
                del header, blobs
        except Exception as e:
            print(f"sandbox: cannot set up the job's files: {type(e).__name__}: {e}", file=sys.stderr)
            os._exit(1)
        os.closerange(4, CELLS_AT)
        keep = give_cells(int(job.get("cells", 0)))
        os.closerange(keep, 65536)
        cpu = int(job["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (job["fsize"], job["fsize"]))
        resource.setrlimit(resource.RLIMIT_NOFILE, (job["nofile"], job["nofile"]))
        # (RLIMIT_CORE: 1 since the launch, fixed: _seccomp)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir("/work/job")
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


def give_cells(n: int) -> int:
    """Put the first ``n`` cells' fds at 5.. and their description at fd 4 (in the child, whose fds
    4.. are closed by now but for the cells'); the first fd number it does not use."""
    if n <= 0:
        return 4
    if n > len(CELLS):
        raise ValueError(f"the job asks for {n} cells, the slot has {len(CELLS)}")
    described = []
    for k, fds in enumerate(CELLS[:n]):
        for i, fd in enumerate(fds):
            os.dup2(fd, 5 + 3 * k + i)
        described.append([5 + 3 * k + i for i in range(3)])
    fd = os.memfd_create("cells", 0)
    os.write(fd, json.dumps({"cgroup": CGROUP, "cells": described}).encode())
    os.lseek(fd, 0, os.SEEK_SET)
    if fd != 4:  # (fd 4 is free here, so memfd_create usually returns it)
        os.dup2(fd, 4)
        os.close(fd)
    return 5 + 3 * n


def thaw_cells() -> None:
    """v1: a process of a frozen cell would outlive the sweep (SIGKILL waits for the thaw)."""
    if CGROUP == 1:
        for _, control, _ in CELLS:
            try:
                os.write(control, b"THAWED")
            except OSError:
                pass


def start_job(header: dict, fds: list[int]) -> int:
    """Before the fork: anything failing here is the slot's problem, not the job's."""
    os.mkdir("/work/job")
    _reaped_cpu[0] = 0.0
    pid = os.fork()
    if pid == 0:
        child(fds[0:2], fds[2:6], header)
    return pid


def wait_unless_stopped(pidfd: int, pid: int, timeout: float) -> str:
    """Wait for the job's main process to exit ("exited"), for its deadline ("timeout"), or until it
    stays stopped (state T or t) while the job can do nothing about it ("stopped"): checked every
    ``STOP_TICK_S``, from the first check that sees it stopped, until the job's processes have used
    ``STOP_CPU_S`` of CPU or two checks in a row found none of them runnable.

    A job whose main process was stopped (a SIGSTOP from one of its own processes: the code runner's
    candidate stopping the runner that forks it, say) can only wait for its deadline unless one of its
    processes continues it; a batch of candidates in one job waited for the sum of their deadlines
    (~85 s for eight). Its own processes did it, so ending it then, as timed out, is its own verdict, a
    deadline early. CPU time, not wall time, bounds the wait while a process of the job could still
    continue it: one that runs has had its chance, one that waits for a CPU on a loaded host has not
    (runnable, it keeps the job alive). One read of /proc per tick, and only in jobs that outlive a
    tick (the poll per job stays one for the short ones)."""
    end = time.monotonic() + timeout
    since: float | None = None  # the job's CPU seconds when its main process was first seen stopped
    idle = 0  # checks in a row, since then, that found none of the job's processes runnable
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return "timeout"
        if wait_for(pidfd, select.POLLIN, min(left, STOP_TICK_S)):
            return "exited"
        if proc_state(pid) not in (b"T", b"t"):
            since, idle = None, 0
            continue
        runnable, cpu = _activity()
        idle = 0 if runnable else idle + 1
        if since is None:
            since = cpu
        elif cpu - since >= STOP_CPU_S or idle >= 2:
            return "stopped"


def _activity() -> tuple[bool, float]:
    """Whether any process of the job is runnable, and the CPU seconds its processes have used."""
    runnable, cpu = False, 0.0
    for other in _others():
        runnable = runnable or proc_state(other) == b"R"
        try:
            cpu += proc_sched(other, 0.0, BASE["nice"], BASE["scheduler"][0])[3]
        except (OSError, ValueError, IndexError):
            continue
    return runnable, cpu


def finish_job(pid: int, header: dict, start: float) -> dict:
    """After the fork: wait for the job (or its deadline), end every process of it, measure it."""
    timeout = header["timeout"]
    run_delay, alive, deprioritized = 0.0, timeout, False
    pidfd = os.pidfd_open(pid)
    try:
        ended = wait_unless_stopped(pidfd, pid, timeout)
        timed_out = ended != "exited"
        if ended == "stopped":  # it can only wait for its deadline: ended now, as timed out
            os.kill(pid, signal.SIGKILL)
        elif timed_out:  # was it waiting for a CPU (starved) or sleeping?
            run_delay, alive, deprioritized = kill_measured()
        _, st, ru = os.wait4(pid, 0)
    finally:
        os.close(pidfd)
    duration = time.monotonic() - start
    thaw_cells()
    sweep()  # now nothing can write to the outputs any more
    return {
        "exit_code": os.WEXITSTATUS(st) if os.WIFEXITED(st) else None,
        "signal": os.WTERMSIG(st) if os.WIFSIGNALED(st) else None,
        "timed_out": timed_out,
        "duration_s": duration,
        "maxrss": ru.ru_maxrss * 1024,
        "cpu_s": ru.ru_utime + ru.ru_stime + _reaped_cpu[0],
        "run_delay_s": run_delay,
        "alive_s": alive,
        "deprioritized": deprioritized,
    }


def serve(chan: socket.socket) -> None:
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(chan, 65536, 6)
        except OSError:
            return
        if not msg:
            return  # the host closed the channel
        header, pid = None, None
        try:
            header = json.loads(msg)
            if len(fds) != 6:
                raise ValueError(f"expected 6 fds, got {len(fds)}")
            tainted = restore_state(BASE)
            if tainted:
                raise OSError(tainted)
            start = time.monotonic()
            pid = start_job(header, fds)
        except Exception as e:  # the slot could not start the job: the host retries it elsewhere
            sweep()
            reply = {"zygote_error": f"{type(e).__name__}: {e}"}
        finally:
            for fd in fds:  # this process keeps nothing of the job: the host holds the memfds
                os.close(fd)
        if pid is not None:
            try:
                reply = finish_job(pid, header, start)
            except Exception as e:  # the job broke its slot: the job's failure
                sweep()
                reply = {"slot_error": f"{type(e).__name__}: {e}"}
        unclean = leftovers() or ("processes are left" if _has_children() else None)
        reply["clean"] = unclean is None  # else the host restarts this slot
        reply["unclean"] = unclean
        chan.send(json.dumps(reply).encode())
        msg = header = reply = fds = None  # nothing of this job stays referenced while the next one runs


def main() -> None:
    global BASE, CELLS, CGROUP
    os.chdir("/")  # never keep a job's file system in use: the host replaces them between jobs
    given = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"cgroup": 0, "cells": []}
    CGROUP, CELLS = int(given["cgroup"]), []
    for k, fds in enumerate(given["cells"]):
        CELLS.append([os.dup2(fd, CELLS_AT + 3 * k + i) for i, fd in enumerate(fds)])
        for fd in fds:
            os.close(fd)
    os.dup2(0, CHANNEL)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 3):  # 3 too: fds received for a job are then >= 4, clear of the child's 0-3
        if fd != null:
            os.dup2(null, fd)
    if null not in (0, 1, 3):
        os.close(null)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_DUMPABLE, 0) failed")
    chan = socket.socket(fileno=CHANNEL)
    BASE = own_state()
    gc.collect()
    gc.freeze()
    greeting = {"ready": True, "pid": os.getpid(), "python": sys.version.split()[0], "clean": leftovers() is None}
    chan.send(json.dumps(greeting).encode())
    serve(chan)


BASE: dict = {}
CELLS: list[list[int]] = []  # per cell: procs, control, census (``_cgroup.Cell``), at CELLS_AT..
CGROUP = 0

if __name__ == "__main__":
    main()
