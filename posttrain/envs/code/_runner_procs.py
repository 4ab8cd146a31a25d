"""The code runner's processes: hardening, the template that forks servers, the servers.

Part of the runner that runs inside the sandbox (``_runner.py``). The *template* is a fork of the
runner made before the runner read its payload; a *server* is a fork of the runner (one per item)
or of the template (a replay, a fresh start), that moves itself into the sandbox's cell before any
model code exists, runs the candidate and answers calls.
"""

import _ctypes
import _signal as signal
import builtins
import marshal
import os
import resource
import sys
import time

from posttrain.envs.code._runner_wire import Channel, ProtocolError, _compile, decode, describe, encode

READ_ONLY_DIRS = ("/usr", "/")
SERVER_START_S = 10.0  # a server forked by the template says hello within this (generous: a loaded 2-core host)


# ------------------------------------------------------------------ process hardening


_LIBC = []


def libc(name, *args):
    """Call a C library function with int/None arguments (``_ctypes``: ``ctypes`` costs an import)."""
    if not _LIBC:
        _LIBC.append(_ctypes.dlopen(None, 2))
    return _ctypes.call_function(_ctypes.dlsym(_LIBC[0], name), args)


def make_undumpable():
    """PR_SET_DUMPABLE 0: same-uid processes cannot open our /proc/<pid>/mem, fds, maps."""
    libc("prctl", 4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    return libc("prctl", 3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE


def ignore_signals():
    """Ignore every signal that can be ignored (SIGKILL and SIGSTOP cannot; SIGCHLD stays)."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            continue
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (OSError, ValueError, RuntimeError):
            pass


def alarm(seconds):
    """Have the kernel end this process ``seconds`` from now (``None``: never): ``SIGALRM`` at its
    default action, which needs no Python code to run, so it ends a runner stuck in one long C call
    (``str()`` of a huge integer the test formats, a set built of colliding values). A candidate can
    send it ``SIGALRM`` then, as it can send ``SIGKILL`` at any time: no report either way."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN if seconds is None else signal.SIG_DFL)
    if seconds is not None:
        signal.setitimer(signal.ITIMER_REAL, max(float(seconds), 0.001))


def _read_only(path):
    """The real path of ``path`` if it is (or would be created) on a read-only mount, else None."""
    real = os.path.realpath(path)
    probe = real
    while True:
        try:
            return real if os.statvfs(probe).f_flag & os.ST_RDONLY else None
        except FileNotFoundError:
            parent = os.path.dirname(probe)
            if parent == probe:
                return None
            probe = parent
        except OSError:
            return None


def confine_imports():
    """Working directory and every import path on read-only mounts: nothing a candidate writes
    can be imported (or read by linecache) here. Raises if no read-only directory exists."""
    home = next((d for d in READ_ONLY_DIRS if _read_only(d)), None)
    if home is None:
        raise RuntimeError(f"none of {READ_ONLY_DIRS} is a read-only mount")
    os.chdir(home)
    sys.path[:] = [p for p in (_read_only(e) for e in sys.path if isinstance(e, str) and e) if p]
    sys.path_importer_cache.clear()


_RLIMITS = tuple(getattr(resource, n) for n in sorted(dir(resource)) if n.startswith("RLIMIT_"))


def attributes(pid):
    """What another same-uid process can change about ``pid``: limits, nice, CPUs, policy."""
    try:
        limits = [resource.prlimit(pid, r) for r in _RLIMITS]
        return (limits, os.getpriority(os.PRIO_PROCESS, pid), sorted(os.sched_getaffinity(pid)),
                os.sched_getscheduler(pid))
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------ the template and its servers

def template_main(control, pairs, procs, mask=()):
    """The template: a fork of the runner made before the runner read its payload, so it never held
    a test, an expected value or the nonce (nor did the fork server it descends from hold any job's
    data: the sandbox's guarantee, ``posttrain/sandbox/_zygote.py``). It ignores every signal it can
    and keeps only its control pipe, the servers' pipes and the cell's ``cgroup.procs`` (each server
    moves itself into the cell once it is given a candidate, before any model code runs), reaps
    nothing by hand (SIGCHLD ignored: the kernel reaps every server, and as child subreaper every
    orphan of one), and forks server k when the runner asks for it (a line on the control pipe):
    only a replay or a fresh start needs one, so none waits forked ahead. (The standard modules
    candidates import were imported by the fork server: ``posttrain/sandbox/_pump.py`` ``PRELOAD``.)
    It is forked with every signal blocked (``Template``), and restores ``mask``, the runner's, once
    it ignores them: a signal sent before that is pending, then discarded, never acted on."""
    ignore_signals()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    low = 3  # close the rest: the job's stdin memfd (the payload, unread), the report fd, ...
    for fd in sorted({control, procs, *(fd for pair in pairs for fd in pair)}):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)
    libc("prctl", 36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: a server's orphans come here, not to pid 1
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # and are reaped by the kernel at once
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    import gc

    gc.freeze()  # fewer copy-on-write faults in the forks

    for k, request in enumerate(_lines(control)):
        if request != b"s" or k >= len(pairs):
            break
        rfd, wfd = pairs[k]
        if os.fork() == 0:
            try:
                server_main(rfd, wfd, procs, direct=False)
            finally:
                os._exit(0)
        os.close(rfd)
        os.close(wfd)
    os._exit(0)


def _lines(fd):
    """The lines the runner writes to the template's control pipe, until it closes it."""
    buf = b""
    while True:
        while b"\n" not in buf:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                return
            buf += chunk
        line, _, buf = buf.partition(b"\n")
        yield line


def server_main(rfd, wfd, procs, direct=True):
    """A server: greets (``direct``: no, the runner forked it and knows its pid), waits for its
    candidate, moves itself into the cell, then loads the candidate and answers calls until killed.
    (Until it is given its candidate it waits outside the cell, so that killing what the previous
    candidate left does not kill it; the runner checks that nothing stopped it or changed its limits
    meanwhile before it gives it one: ``Template.server``.) A direct server is forked before the
    runner ignores signals, so its dispositions are a Python program's own; one forked by the
    template resets them."""
    os.setsid()
    if direct:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # (the runner ignores it to reap its servers)
    else:
        for sig in signal.valid_signals():
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                try:
                    signal.signal(sig, signal.SIG_DFL)
                except (OSError, ValueError, RuntimeError):
                    pass
        signal.signal(signal.SIGINT, signal.default_int_handler)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    low = 3
    for fd in sorted((rfd, wfd, procs)):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)
    os.chdir("/tmp")
    chan = Channel(rfd, wfd)
    if not direct:
        chan.send({"pid": os.getpid()})
    hello = chan.recv_obj()
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # no POSIX message queue outlives it
    try:
        os.write(procs, b"0")  # into the cell, before any model code exists (dies here if it cannot)
        os.close(procs)
    except OSError:
        os._exit(3)
    # Alive, in the cell, no model code yet: a server that dies or stops before saying so was sunk by
    # an earlier candidate (a signal it sent is delivered at the latest as this one waits), never by
    # its own (``Template.server``).
    chan.send({"in": True})
    ns = {"__name__": "candidate", "__builtins__": builtins}
    try:
        exec(_compile(hello["source"], "candidate.py"), ns)
        fn = ns.get(hello["entry_point"])
        if not callable(fn):
            raise NameError(f"the program does not define a function {hello['entry_point']!r}")
    except BaseException as e:  # noqa: BLE001 - SystemExit at import included: reported, not obeyed
        chan.send({"import_error": describe(e)})
        os._exit(0)
    chan.send({"ready": True})
    request = hello
    while True:  # "calls": many calls in one message (with the candidate, too), one reply line each
        for r in request.get("calls", ()):
            chan.send(_answer(fn, marshal.loads(r)))
        if "args" in request:
            chan.send(_answer(fn, request))
        request = chan.recv_obj()


def _answer(fn, request):
    try:
        result = fn(*decode(request["args"]), **decode(request["kwargs"]))
        return {"ok": encode(result)}
    except BaseException as e:  # noqa: BLE001 - the candidate's exception goes to the test
        return {"exc": describe(e)}


class ServerLost(Exception):
    """The template did not produce a working server; ``broken``: because the template, or the
    server that waited for its candidate, is stopped or gone (something killed or stopped it),
    rather than slow. ``waited``: in a batch, where any earlier candidate may have sunk the template
    or a server forked ahead, not only the item's own (``Template.server``)."""

    def __init__(self, message, broken=False):
        super().__init__(message)
        self.broken, self.waited = broken, False


class Template:
    """The servers of a job: ``direct`` of them forked by the runner itself, the rest by the template
    (``template_main``), on request; all before the runner reads its payload. One server per item is
    the common case (a warm-up, then the test), so those come from the runner at once, and the
    template only forks what a replay or a fresh start needs. Made before the runner ignores
    signals (``runner_main``): the direct servers keep a Python program's dispositions, and the
    template ignores them itself."""

    def __init__(self, n_servers, cell, direct=0):
        control_r, self.control = os.pipe()
        pairs, self.channels = [], []
        for _ in range(n_servers):
            to_r, to_w = os.pipe()
            from_r, from_w = os.pipe()
            pairs.append((to_r, from_w))
            self.channels.append(Channel(from_r, to_w))
        self.direct = min(direct, n_servers)
        mine = [self.control] + [fd for chan in self.channels for fd in (chan.rfd, chan.wfd)]
        libc("prctl", 36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the direct servers' orphans come here,
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # and, with its servers, are reaped by the kernel
        self.pids = []
        for rfd, wfd in pairs[: self.direct]:
            pid = os.fork()
            if pid == 0:
                try:
                    server_main(rfd, wfd, cell.procs, direct=True)
                finally:
                    os._exit(0)
            self.pids.append(pid)
        # Blocked until the template ignores them: a candidate that signals every process at import
        # ended a template not yet through ``ignore_signals`` (a loaded host: 9 runs of 30, alone).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            self.pid = os.fork()
            if self.pid == 0:
                try:
                    for fd in mine:
                        os.close(fd)
                    template_main(control_r, pairs[self.direct :], cell.procs, mask)
                finally:
                    os._exit(0)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in [control_r, *(fd for pair in pairs for fd in pair)]:
            os.close(fd)
        self.next = 0
        self.expect = attributes(os.getpid())  # what a waiting server's must still be (it inherited them)

    def server(self, item, calls=()):
        """``(pid, Channel)`` of a fresh server that has been sent ``item``'s candidate, and
        ``calls`` (marshalled requests) to answer in order once it has loaded it; ServerLost if the
        template cannot make one, or if the server, while it waited, was stopped, killed or had its
        limits, priority, CPUs or policy changed (by an earlier candidate: ``broken``)."""
        if self.next >= len(self.channels):
            raise ServerLost("no server channel left")
        try:
            if not _alive(self.pid):
                raise ServerLost("the template is stopped or gone", broken=True)
            chan = self.channels[self.next]
            self.next += 1
            pid = self.pids[self.next - 1] if self.next <= self.direct else self._greeted(chan)
            return self._handed(item, calls, chan, pid)
        except ServerLost as e:
            # The template and the direct servers were forked before the job's first candidate: in
            # a batch, any of its candidates may have stopped or killed them, not only this item's.
            e.waited = self.direct > 1
            raise

    def intact(self):
        """The template and the direct servers still waiting for their items neither stopped nor gone,
        nor a SIGKILL or SIGSTOP pending for one (sent but not yet acted on: a loaded host may deliver
        it a while later). Asked after every item: the last item of a job is never asked for a later
        server, so a candidate that killed or stopped the template (its parent when it runs on a
        server the template forked) would go unseen; and one that stopped the next item's server
        (alone, that pid is the template's) cost that item its slot, not itself its verdict."""
        return all(_whole(pid) for pid in (self.pid, *self.pids[self.next :]))

    def _handed(self, item, calls, chan, pid):
        """``(pid, chan)`` once the server ``pid`` took ``item``'s candidate (``server``)."""
        # Everything an earlier candidate started is dead by now (the cell was emptied), so what is
        # seen here holds until the candidate is sent: a stopped server would never answer, one with
        # lowered limits would fail; either would cost this candidate a verdict it did not earn.
        if not _alive(pid) or attributes(pid) != self.expect:
            chan.close()
            _kill(pid)
            raise ServerLost("the server that waited for its candidate was stopped, killed or changed",
                             broken=True)
        try:
            chan.send_obj({"source": item["candidate"], "entry_point": item["entry_point"], "calls": list(calls)})
        except OSError:
            chan.close()
            raise ServerLost("a server did not take its candidate", broken=True) from None
        # The checks above cannot see a SIGKILL or SIGSTOP an earlier candidate sent that is still on
        # its way (on a loaded host it may act a while later): the server says it is in the cell
        # before it runs the candidate's code, and one that dies or stops first is lost, not failed.
        try:
            self._said_in(chan, pid)
        except ServerLost:
            _kill(pid)
            raise
        return pid, chan

    def _said_in(self, chan, pid):
        """Wait for the server ``pid`` to say it is in the cell (``{"in": true}``), within
        SERVER_START_S: ServerLost otherwise, ``broken`` when it was stopped or killed or sent
        something else."""
        try:
            message = _recv_watching(chan, pid, time.monotonic() + SERVER_START_S)
        except TimeoutError:
            chan.close()
            raise ServerLost("a server did not say 'in' in time") from None
        except (EOFError, OSError, ProtocolError):
            chan.close()
            raise ServerLost("the server that waited for its candidate was killed", broken=True) from None
        if message is _STOPPED:
            chan.close()
            raise ServerLost("the server that waited for its candidate was stopped or killed", broken=True)
        if message != {"in": True}:
            chan.close()
            raise ServerLost(f"a server sent {str(message)[:80]!r} for 'in'", broken=True)

    def _greeted(self, chan):
        """The pid a server forked by the template greets with (it is forked now, on request)."""
        deadline = time.monotonic() + SERVER_START_S
        try:
            os.write(self.control, b"s\n")
            hello = _recv_watching(chan, self.pid, deadline)  # a template stopped meanwhile never answers
        except EOFError:  # the server is gone before it greeted
            chan.close()
            raise ServerLost("the server forked for the candidate is gone", broken=True) from None
        except (OSError, TimeoutError, ProtocolError) as e:
            chan.close()
            broken = not _alive(self.pid)
            if not broken and not isinstance(e, TimeoutError):
                # The channel closed: the template is dying (its fds close before its state turns Z),
                # or it is alive and something else broke. Give a dying template a moment to show it.
                settle = time.monotonic() + 1.0
                while not broken and time.monotonic() < settle:
                    time.sleep(0.01)
                    broken = not _alive(self.pid)
            raise ServerLost("the template did not start a server in time", broken) from None
        if hello is _STOPPED:
            chan.close()
            raise ServerLost("the template is stopped or gone", broken=True)
        if type(hello) is not dict or type(hello.get("pid")) is not int:
            chan.close()
            raise ServerLost("a server sent a malformed greeting")
        return hello["pid"]


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid):
    """``pid`` runs or waits (``S``, ``R``, ``D``): neither stopped nor gone."""
    return _state(pid) in ("S", "R", "D")


_STOPPED = object()
"""What ``_recv_watching`` returns once the process it watches is stopped or gone."""


def _recv_watching(chan, pid, deadline):
    """One message from ``chan``, watching ``pid`` meanwhile (a stopped process never answers): the
    message; ``_STOPPED`` once ``pid`` is stopped or gone; TimeoutError past ``deadline``; EOFError,
    OSError and ProtocolError as ``Channel.recv`` raises them."""
    while True:
        try:
            return chan.recv(min(deadline, time.monotonic() + 0.05))
        except TimeoutError:
            if not _alive(pid):
                return _STOPPED
            if time.monotonic() >= deadline:
                raise


_KILL_OR_STOP = (1 << (9 - 1)) | (1 << (19 - 1))  # SIGKILL, SIGSTOP: the two no process can ignore


def _pending_stop_or_kill(pid):
    """A SIGKILL or SIGSTOP pending for ``pid`` (its own or its thread group's), or ``pid`` gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            lines = f.read().splitlines()
        masks = [int(line.split()[1], 16) for line in lines if line.startswith((b"SigPnd:", b"ShdPnd:"))]
    except (OSError, IndexError, ValueError):
        return True
    return len(masks) != 2 or any(mask & _KILL_OR_STOP for mask in masks)


_PF_EXITING = 0x4


def _whole(pid):
    """``pid`` neither stopped nor gone nor exiting, and no SIGKILL or SIGSTOP pending for it. The
    pending signals are read first: one acted on between the reads shows in the state read after, and
    a process killed but not yet gone runs (``R``) with its ``PF_EXITING`` flag set."""
    if _pending_stop_or_kill(pid):
        return False
    fields = _stat(pid)
    try:
        return fields[0] in (b"S", b"R", b"D") and not int(fields[6]) & _PF_EXITING
    except (IndexError, ValueError):
        return False


def _stat(pid):
    """The fields of /proc/``pid``/stat after the command's name (state first), [] if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()
    except OSError:
        return []


def _state(pid):
    """The state letter of ``pid`` from /proc ("" if it is gone)."""
    fields = _stat(pid)
    try:
        return fields[0].decode() if fields else ""
    except UnicodeDecodeError:
        return ""
