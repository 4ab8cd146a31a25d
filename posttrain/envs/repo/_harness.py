"""The repo domain's test harness: runs in the sandbox, under the sandbox's /usr/bin/python3 and its
pytest, and reports first-hand test outcomes over fd 3 behind a per-run nonce.

The host starts it as ``python3 -I -B -c LOADER`` with a JSON payload on stdin (``_grade.py``):
the nonce, the test ids, the verifier's test files, the files the candidate's diff changed. The
code under test shares this process with pytest, so nothing a Python object holds can be trusted
by itself. What the harness does about that (docs/repo-verifier-threat-model.md has the rest):

- **A kernel the candidate cannot reach.** Before any candidate code is imported it installs a
  PEP 578 audit hook (which cannot be removed). Everything that decides the verdict lives in the
  hook's closure: the nonce, the first-hand outcomes, the pristine test code, the set of trusted
  code objects, a snapshot of pytest's, pluggy's, unittest's and the standard library's module and
  class dictionaries, and the system calls it needs (captured ``posix.write``/``_exit``). The hook
  is referenced by nothing but the interpreter's hook list; it never raises, never calls a method
  of an object it did not type-check, and a denial ends the process (after an authenticated
  ``tamper`` line): a denied operation never leaves a traceback that holds the hook's frame.
- **No route to the kernel's memory.** Every way to a frame or to arbitrary memory is audited, and
  the hook denies them: ``ctypes``, ``gc.get_objects/referrers/referents``, ``sys._current_frames``,
  ``settrace``/``setprofile``, another audit hook, swapping a function's ``__code__``, opening
  /proc/<pid>/mem and its relatives (symlinks resolved), any frame above the hook while it runs
  (a finalizer or GC callback inside it), and, while changed code is on the stack, frames
  (``sys._getframe``, ``tb_frame``, ``gi_frame``, ...) except for the few standard-library callers
  that only read a module name. Python signal handlers, which are handed the interrupted frame
  without an audit event, cannot be installed (``signal.signal`` refuses callables). The process
  is not dumpable, so a child process cannot read its memory either.
- **No program outside it.** Another program runs without the hook (``cat`` read a withheld test;
  one could rewrite an unchanged file before its import), so while changed code is on the stack
  starting one is denied (``subprocess``, ``os.exec*``, ``posix_spawn``, ``os.system``, and
  ``_posixsubprocess.fork_exec``, which has no event of its own and gets the real function from the
  kernel each call); ``_imp.create_builtin`` asks the kernel too, which refuses a fresh
  ``_signal``/``_posixsubprocess``/``_imp``. A fork keeps the hook. An extension module loads only from
  the system's ``/usr`` (``EXTENSION_FROM``). A relative path opened with a
  ``dir_fd`` (not in the ``open`` event) is checked from every open directory as well. A withheld
  test's source is read only by its import (a weakref callback of ``functools.partial`` runs stdlib
  code with no changed frame under it), and ``weakref.finalize`` runs as the code under test.
- **First-hand outcomes.** A test passes only if the harness itself saw the pristine test function
  return: its own ``pytest_pyfunc_call`` calls the test (unittest's ``addSuccess`` for TestCase
  tests), and the hook checks that the event comes from that code, that every frame below it is
  trusted code (pytest, pluggy, the standard library, this harness) down to the process's first
  frame, that the test function's code equals the test file's pristine code compiled before the
  candidate ran, that it ran once, and that the snapshotted dictionaries are unchanged. pytest's
  own reports, the exit status and the counts corroborate; they never decide a pass alone.
- **Test modules stay as imported.** pytest's hook rewrites every verifier module, helpers too
  (``_rewrite_helpers``); each ends with ``MODULE_READY`` (``_mark_ready``): the kernel snapshots its
  globals and its classes' methods there, every undecorated ``def`` already the function it made, and
  every global it bound by importing a verifier module that module (``_module_imports``); a helper
  rebound, deleted or shadowed afterwards is ``tamper`` at the next test, and at the read itself when a
  function of the module reads it as a global (``_pin_globals``).
- **Tests stay the verifier's.** While changed code is on the stack, writing, renaming or deleting
  a verifier test file, reading a withheld one and running a withheld test (``ENTERED``) are
  denied; a test file edited on disk before pytest imports it no longer compiles to the pristine
  code. What the tests call to judge (the comparison guard, unittest's assertions) are constants
  of their code (``_bind``), out of reach of a patch that restores itself.

- **Nothing it reads by name is the candidate's to write.** The kernel runs over a private copy of
  this module's globals and of the builtins (``_private``); what the code under test can reach and the
  tests call (unittest's guarded assertions, ``pytest.approx``, ``TestCase._callTestMethod``) reads every
  name from a constant of its code (``_sealed``): ``__globals__`` and ``__closure__`` are read with no
  audit event, and globals and cells are writable. Code compiled or loaded under a trusted file's name
  must be that file's (bytes on disk, the standard library's ``.pyc``, a test module's pristine code),
  changed code on the stack or not.

Not stopped here (the threat model says more): what the code under test computes in the tests'
own values, a pristine dunder the diff rewrote to agree, a patch of shared state (other than a verifier
module's globals) that restores itself before the check, module-level data of a test module read (or mutated) through
``sys.modules``, and anything that corrupts the interpreter from C. The grader's diff policy (``_diff.py``) and the
clean pristine copy handle conftest, configuration and history.
"""

from __future__ import annotations

import sys

REPORT_TAG = "posttrain-repo"
TAMPER_EXIT = 86
"""Exit status of a run the kernel ended (the host reads the authenticated tamper line first)."""
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
NO_REIMPORT = frozenset({"_signal", "signal", "_posixsubprocess", "_imp", "ctypes", "_ctypes", "_testcapi", "_testinternalcapi", "_testmultiphase",
                         "_xxsubinterpreters", "_xxinterpchannels", "_interpreters", "gc"})
"""Modules whose fresh copy would bring back what the kernel took away (signal handlers, memory)."""
ALWAYS_DENIED = ("ctypes.", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
                 "sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.monitoring", "_xxsubinterpreters",
                 "cpython.remote_debugger_script", "sys.remote_exec")
NESTED_DENIED = frozenset({"compile", "exec", "code.__new__", "marshal.loads", "marshal.load", "marshal.dumps",
                           "import", "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn",
                           "subprocess.Popen", "_thread.start_new_thread", "os.kill", "os.putenv"})
"""Events the kernel never raises itself: raised while it runs, they come from code running inside it."""
FILE_EVENTS = frozenset({"os.remove", "os.rename", "os.rmdir", "os.truncate", "os.chmod", "os.chown",
                         "os.utime", "os.link", "shutil.rmtree", "shutil.move", "shutil.copyfile",
                         "os.chflags"})
NAMESPACE_EVENTS = frozenset({"os.symlink", "os.chdir"})
"""Events that change where a path leads (with ``os.rename`` of a directory): the kernel checks a path when
its ``open`` event fires, before the system call resolves it, and a thread of the code under test that
flipped a directory in between (renamed ``/tmp/A``, holding a symlink to ``/work/tests``, onto the path it
had just checked as a decoy) read the withheld test: 1 of 4 runs passed every listed test. Denied to the
code under test: with no symlink, directory rename or working-directory change of its own, a path it
checked names the same file when it is opened."""
EXTENSION_FROM = "/usr/"
"""Where a compiled extension module may come from (the ``import`` event of ``_imp.create_dynamic`` names its
file; a source import's names none). Machine code runs outside this hook: the code under test wrote a
``.so`` it carried in base64 to /tmp, loaded it with ``importlib.machinery.ExtensionFileLoader``, and its C
took the hook off the interpreter (``interp->audit_hooks``), read the nonce from the kernel's closure and
wrote a ``final`` of its own, every test passed: a pack task passed with no fix. A repository or dependency
that ships its own extension is not gradable by this harness (the packs' projects and wheels are pure Python)."""
SPAWN = "_posixsubprocess.fork_exec"
"""The event of the harness's ``fork_exec`` (``_install_spawn_guard``): the C function starts a program
with no audit event of its own."""
BUILTIN = "_imp.create_builtin"
"""The event of the harness's ``_imp.create_builtin``: a fresh ``_posixsubprocess`` or ``_signal`` from
the real one has the functions the harness took away."""
SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.exec", "os.posix_spawn", "os.system", SPAWN, "os.fork", "os.forkpty"})
"""Another program started while changed code is on the stack runs without the kernel: ``cat`` read the
withheld test, and it could rewrite an unchanged file before its import. A fork keeps the hook, but its
fd 3 is the fork's to replace: a child that put its own pipe there and broke a rule read the kernel's
``tamper`` line, nonce and all, and its parent wrote a ``final`` of its own (6 of 6 with no fix)."""
CORE = frozenset({"_pytest", "pytest", "pluggy", "unittest", "builtins"})
"""Top-level names of the modules (and their classes) checked after every test; the rest at the end."""
PROC_OK = frozenset({"status", "stat", "statm", "cmdline", "limits", "io", "comm", "cgroup", "environ"})
PRELOAD = ("os", "re", "json", "math", "cmath", "random", "string", "textwrap", "itertools", "functools",
           "operator", "collections", "collections.abc", "copy", "types", "typing", "dataclasses", "enum",
           "decimal", "fractions", "numbers", "datetime", "time", "calendar", "heapq", "bisect", "array",
           "struct", "io", "abc", "contextlib", "warnings", "weakref", "inspect", "traceback", "logging",
           "unittest", "unittest.mock", "tempfile", "pathlib", "shutil", "glob", "fnmatch", "threading",
           "queue", "pickle", "hashlib", "base64", "binascii", "codecs", "unicodedata", "locale", "pprint",
           "reprlib", "difflib", "statistics", "uuid", "zlib", "gzip", "csv", "argparse", "keyword",
           "signal", "linecache", "ast", "tokenize", "importlib", "importlib.util", "importlib.machinery",
           "concurrent.futures", "asyncio", "doctest", "platform", "sysconfig", "email", "html", "urllib.parse",
           "ipaddress", "symtable")
VOLATILE: dict[str, frozenset[str] | None] = {
    "sys": None, "faulthandler": None, "atexit": None, "gc": None, "__main__": None,
    "warnings": frozenset({"filters", "showwarning", "_showwarnmsg", "_showwarnmsg_impl", "_filters_mutated",
                           "_onceregistry", "defaultaction"}),
    "_pytest.assertion.util": frozenset({"_reprcompare", "_assertion_pass", "_config"}),
    "_pytest.assertion.rewrite": frozenset({"_hook"}), "pdb": frozenset({"set_trace"}),
    "tempfile": frozenset({"tempdir", "_name_sequence"}), "threading": frozenset({"excepthook", "_main_thread"}),
    "linecache": frozenset({"cache"}), "random": frozenset({"_inst"}), "re": frozenset({"_cache"}),
    "builtins": frozenset({"_"}), "asyncio.events": frozenset({"_event_loop_policy"}),
    "doctest": frozenset({"master"}), "weakref.finalize": frozenset({"_dirty", "_registered_with_atexit"}),
    "concurrent.futures": frozenset({"ThreadPoolExecutor", "ProcessPoolExecutor"}),
    "_pytest.config.Config": frozenset({"_getini_unknown_type", "inifile", "invocation_dir", "rootdir"}),
    "_pytest.debugging.pytestPDB": frozenset({"_config", "_pluginmanager", "_recursive_debug", "_wrapped_pdb_cls"}),
    "_pytest.cacheprovider.Cache": frozenset({"makedir"}), "_pytest.fixtures.FixtureRequest": frozenset({"fspath"}),
    "_pytest.main.Session": frozenset({"startdir"}), "_pytest.nodes.Node": frozenset({"fspath"}),
    "_pytest.terminal.TerminalReporter": frozenset({"startdir"}),
}
"""What pytest and the standard library change in a normal run (pytest's legacypath plugin adds
class attributes at configure time; capture swaps sys.stdout; warnings and tempfile keep state),
found by diffing the dictionaries of three projects' runs before and during a test: ignored by the
integrity check. ``None``: the module is not checked (its state is the interpreter's)."""
CLASS_ADDED_OK = frozenset({"__slotnames__", "_pytest_diamond_inheritance_warning_shown", "_abc_impl"})


def _private(fn: object) -> object:
    """``fn`` over a private copy of this module's globals and of the builtins: the kernel's functions
    read ``SPAWN_EVENTS``, ``ALWAYS_DENIED``, ``all``, ``OSError`` ... by name at each event, and the
    module's own globals are the code under test's to write (``unittest.TestCase.assertEqual.__globals__``,
    no audit event): ``SPAWN_EVENTS`` emptied there let it ``posix_spawn`` a ``cat`` of the withheld test."""
    import builtins
    import types

    namespace = dict(globals())
    namespace["__builtins__"] = dict(vars(builtins))
    return types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)


def _prctl_not_dumpable() -> bool:
    """PR_SET_DUMPABLE 0: no other process of uid 65534 can read this one's memory (/proc/pid/mem)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001 - reported in the ready line; the kernel still guards /proc
        return False


def _code_objects(root: object, out: dict[int, object], depth: int = 0) -> None:
    """Every code object reachable from a function, class or code object (nested ones included)."""
    import types

    if depth > 6:
        return
    if isinstance(root, types.CodeType):
        if id(root) not in out:
            out[id(root)] = root
            for const in root.co_consts:
                _code_objects(const, out, depth) if isinstance(const, types.CodeType) else None
        return
    for inner in _inner(root):
        _code_objects(inner, out, depth + 1)


def _inner(root: object) -> list:
    """What a function, method wrapper, property or class holds that may hold code."""
    import types

    if isinstance(root, staticmethod | classmethod):
        return [root.__func__]
    if isinstance(root, property):
        return [f for f in (root.fget, root.fset, root.fdel) if f is not None]
    if isinstance(root, types.FunctionType):
        wrapped = root.__dict__.get("__wrapped__")
        return [root.__code__] + ([wrapped] if wrapped is not None else [])
    if isinstance(root, type):
        module = vars(root).get("__module__")
        return [v for v in list(vars(root).values())
                if not isinstance(v, type) or (v is not root and vars(v).get("__module__") == module)]
    return []


def _snapshot(modules: dict[str, object]) -> tuple[list, dict[int, object]]:
    """``(entries, code objects)``: for each module (and each class it defines) the object, its type,
    and a copy of its dictionary; every code object reachable from them."""
    import types

    entries, codes = [], {}
    for name, mod in modules.items():
        if name in VOLATILE and VOLATILE[name] is None or type(mod) is not types.ModuleType:
            continue
        skip = VOLATILE.get(name) or frozenset()
        d = vars(mod)
        entries.append((name, mod, types.ModuleType, skip,
                        {k: v for k, v in d.items() if type(k) is str and k not in skip}))
        for value in list(d.values()):
            if isinstance(value, type) and vars(value).get("__module__") == name:
                cname = f"{name}.{value.__qualname__}"
                cskip = VOLATILE.get(cname) or frozenset()
                entries.append((cname, value, type(value), cskip,
                                {k: v for k, v in vars(value).items() if type(k) is str and k not in cskip}))
            _code_objects(value, codes)
    return entries, codes


def _parents(path: str) -> list[str]:
    """Every directory above an absolute ``path``, ``/`` included."""
    parts = path.split("/")[1:-1]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts) + 1)]


def _rewritten_by_pytest(path: str) -> bool:
    """Whether pytest collects the module as a test module (its default ``python_files``, and conftest):
    the withheld ones get their tests marked (``_mark_tests``). Every other verifier module (``tests/
    helpers.py``, a mixin in ``tests/__init__.py``) is rewritten too, by the harness's choice
    (``_rewrite_helpers``)."""
    import fnmatch

    name = path.rsplit("/", 1)[-1]
    return name == "conftest.py" or fnmatch.fnmatch(name, "test_*.py") or fnmatch.fnmatch(name, "*_test.py")


def _pristine_codes(paths: list[str], slots: dict) -> dict[tuple[str, str], object]:
    """``{(file, qualname): code}`` of each verifier Python file, compiled as it will be compiled in the
    run (pytest's rewriter with the comparison guard: test modules and, ``_rewrite_helpers``, the
    others), from the same source and path, before any candidate code runs."""
    import ast
    import types

    import _pytest.assertion.rewrite as rewrite

    out: dict[tuple[str, str], object] = {}
    for path in paths:
        try:
            with open(path, "rb") as fh:
                source = fh.read()
            tree = ast.parse(source, filename=path)
            rewrite.rewrite_asserts(tree, source, path, None)
            module = _bind(compile(tree, path, "exec", dont_inherit=True), slots)
        except (OSError, SyntaxError, ValueError):
            continue  # a test file that does not compile has no test to pass
        out[(path, "<module>")] = module
        stack = [module]
        while stack:
            code = stack.pop()
            for const in code.co_consts:
                if isinstance(const, types.CodeType):
                    out[(path, const.co_qualname)] = const
                    stack.append(const)
    return out


def _make_kernel(cfg: dict, trusted: dict[int, object], entries: list, expected: dict, glue_codes: dict,  # noqa: C901
                 allow_frames: dict[int, object], bottom: object) -> object:
    """The audit hook (module docstring). Its closure is the only place the verdict is kept.

    One function on purpose (ruff's complexity counts its inner functions as its own): the state
    must live in a single closure that nothing else references, so it cannot be split into
    module-level helpers or an object whose attributes the code under test could reach."""
    import _thread
    import gc
    import posix
    import types

    nonce = cfg.pop("nonce")
    write, exit_, lstat, readlink, getcwd = posix.write, posix._exit, posix.lstat, posix.readlink, posix.getcwd
    open_, read, close, getpid, listdir = posix.open, posix.read, posix.close, posix.getpid, posix.listdir
    getframe, get_ident, repr_, len_, type_, id_ = sys._getframe, _thread.get_ident, repr, len, type, id
    str_, bytes_, int_, dict_, memoryview_, list_ = str, bytes, int, dict, memoryview, list
    append = list.append
    join_bytes = bytes.join
    gc_isenabled, gc_disable, gc_enable = gc.isenabled, gc.disable, gc.enable
    class_dict, module_dict = type.__dict__["__dict__"].__get__, types.ModuleType.__dict__["__dict__"].__get__
    startswith, endswith, split, rsplit, join = str.startswith, str.endswith, str.split, str.rsplit, str.join
    decode, encode = bytes.decode, str.encode
    FunctionType, MethodType, FrameType, CodeType = types.FunctionType, types.MethodType, types.FrameType, types.CodeType
    ModuleType = types.ModuleType
    verifier_files = frozenset(cfg["verifier_files"])
    module_codes = {path: code for (path, qualname), code in expected.items() if qualname == "<module>"}
    hidden = frozenset(cfg["hidden"])
    work = cfg["work"]
    busy: set[int] = set()
    verdict: dict = {"begun": {}, "frames": {}, "passed": {}, "reports": [], "notes": [], "finished": False,
                     "running": None, "entered": {}, "called": {}}
    collector = [0, False]  # hook calls under way, and whether the cyclic GC was on before the first
    kernel_codes: set[int] = set()
    candidate_cache: dict[int, bool] = {}
    keep: list = []  # code objects judged, kept alive so their ids stay theirs
    cut_short = {id_(RecursionError): "ran out of stack (a RecursionError)",
                 id_(MemoryError): "ran out of memory (a MemoryError)",
                 id_(KeyboardInterrupt): "was interrupted (a KeyboardInterrupt)"}
    """What the code under test can make the kernel raise: a recursion limit set (or a stack filled) just above
    an audited operation, an address-space rlimit set just above its memory, ``_thread.interrupt_main`` spammed
    from a thread. Each was reported as the harness's own error (an infra error, excluded from the update: 20
    of 20 pack tasks); it is the run's ``fail``."""

    def emit(kind: str, body: str) -> None:
        if getpid() != main_pid:  # a fork's line would carry the nonce to whatever its fd 3 now is
            return
        data = encode(join("\t", (REPORT_TAG, nonce, kind, body)) + "\n", "utf-8", "backslashreplace")
        while data:
            try:
                n = write(3, data)
            except OSError:
                return
            data = data[n:]

    def die(reason: str, kind: str = "tamper") -> None:
        emit(kind, repr_(reason))
        exit_(TAMPER_EXIT)

    pristine_files = frozenset(cfg["pristine_files"])
    protected_files = verifier_files | pristine_files
    protected_dirs = frozenset(p for f in protected_files for p in _parents(f))
    """Every directory above a file whose name the kernel trusts: renamed or opened (a ``dir_fd``, which
    the ``open`` event does not show) by the code under test, it would put other bytes at that name."""
    main_pid, main_thread = getpid(), get_ident()

    deferred = cfg["deferred"]
    """Standard-library code that runs a call the code under test set up, later, when no changed frame is
    on the stack (``weakref.finalize(value, shutil.copyfile, test, "/tmp/x")`` copied the withheld test once
    the test dropped the value): counted as the code under test's."""

    def is_candidate(code: object) -> bool:
        """Code the diff may have shaped: anything but the trusted code objects, the standard library
        and pytest (/usr), the verifier's tests and the repository's unchanged files."""
        key = id_(code)
        hit = candidate_cache.get(key)
        if hit is None:
            name = code.co_filename
            hit = key in deferred or key not in trusted and not (type_(name) is str_ and (
                startswith(name, "/usr/") or startswith(name, "<frozen ") or name in verifier_files or
                name in pristine_files))
            candidate_cache[key] = hit
            keep.append(code)
        return hit

    def candidate_on_stack(frame: object) -> bool:
        if frame is None or get_ident() != main_thread:
            return True  # no Python caller, or a thread: a thread's target has no changed frame under it
        while frame is not None:
            if is_candidate(frame.f_code):
                return True
            frame = frame.f_back
        return False

    def above_kernel(frame: object) -> bool:
        while frame is not None:
            if id_(frame.f_code) in kernel_codes:
                return True
            frame = frame.f_back
        return False

    def chain_ok(frame: object) -> bool:
        """``frame`` (the glue's) and every frame below it are trusted code, down to the first frame."""
        last = frame
        while frame is not None:
            if id_(frame.f_code) not in trusted:
                return False
            last, frame = frame, frame.f_back
        return last.f_code is bottom

    locals_type = type_((lambda: getframe().f_locals)())  # dict to 3.12, a proxy from 3.13 (PEP 667); a frame with no locals

    def local(frame: object, name: str) -> object:
        fl = frame.f_locals
        kind = type_(fl)
        items = dict_.items(fl) if kind is dict_ else kind.items(fl) if kind is locals_type else ()
        for key, value in items:
            if type_(key) is str_ and key == name:
                return value
        return None

    def resolve(path: str) -> str:
        """An absolute path with every symlink followed, by lstat/readlink alone (no library code)."""
        if not startswith(path, "/"):
            try:
                path = getcwd() + "/" + path
            except OSError:  # removed: '..' from it still reaches its old parents, so no path is known
                die("the grader's check of a relative path found the working directory removed", kind="cut_short")
        parts, done, hops = [p for p in split(path, "/") if p and p != "."], [], 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                if done:
                    done.pop()
                continue
            done.append(part)
            here = "/" + join("/", done)
            try:
                mode = lstat(here).st_mode
            except OSError:
                continue
            if mode & 0o170000 == 0o120000 and hops < 40:
                hops += 1
                target = readlink(here)
                done.pop()
                if startswith(target, "/"):
                    done = []
                parts = [p for p in split(target, "/") if p and p != "."] + parts
        return "/" + join("/", done)

    def path_of(arg: object) -> str | None:
        if type_(arg) is str_:
            return arg
        if type_(arg) is bytes_:
            return decode(arg, "utf-8", "surrogateescape")
        return None

    def proc_private(real: str) -> bool:
        parts = split(real, "/")  # ['', 'proc', pid, leaf...]
        if len_(parts) < 3 or parts[1] != "proc":
            return False
        pid = parts[2]
        if not (pid == "self" or pid == "thread-self" or (pid and all(c in "0123456789" for c in pid))):
            return False
        return len_(parts) != 4 or parts[3] not in PROC_OK

    def open_dirs() -> list[str]:
        """The directory of every open file descriptor (``/proc/self/fd``): a relative path opened with a
        ``dir_fd``, which the ``open`` event does not show, names a file under one of them."""
        out = []
        try:
            names = listdir("/proc/self/fd")
        except OSError:
            return out
        for name in names:
            try:
                target = readlink("/proc/self/fd/" + name)
                if startswith(target, "/") and lstat(target).st_mode & 0o170000 == 0o040000:
                    out.append(target)
            except OSError:
                continue
        return out

    def places(path: str, caller: object) -> list[str]:
        """Every file ``path`` may name: resolved from the working directory and, for a relative path
        opened by the code under test, from each open directory (``os.open("../tests/test_x.py",
        dir_fd=fd)`` read a withheld test while the kernel checked ``/tests/test_x.py``)."""
        real = resolve(path)
        if startswith(path, "/") or not candidate_on_stack(caller):
            return [real]
        return [real] + [resolve(base + "/" + path) for base in open_dirs()]

    def on_open(event: str, caller: object, args: tuple) -> None:
        target = args[0] if len_(args) else None
        if type_(target) is int_:
            return
        path = path_of(target)
        if path is None:
            if candidate_on_stack(caller):
                die("the code under test opened a file by a path-like object the grader cannot check")
            return
        for real in places(path, caller):
            check_open(caller, args, real)

    def check_open(caller: object, args: tuple, real: str) -> None:
        if proc_private(real):
            die(f"the code under test opened {real} (another process's or its own memory and state)")
        flags = args[2] if len_(args) > 2 and type_(args[2]) is int_ else 0
        writes = flags & 0o3 or flags & 0o1000 or flags & 0o100 or flags & 0o2000
        if writes and (endswith(real, ".pyc") or endswith(real, ".pyo") or "/__pycache__/" in real) and \
                candidate_on_stack(caller):
            die(f"the code under test wrote compiled bytecode ({real})")
        if (writes and real in pristine_files or real in protected_dirs) and candidate_on_stack(caller):
            die(f"the code under test opened {real} to change what the grader trusts by its name")
        if real not in verifier_files and real not in hidden:
            return
        if real in hidden and endswith(real, ".py") and not writes and reloading_lines(caller):
            die(f"a withheld test's source was loaded into linecache ({real[len_(work):]}), where the code under "
                f"test reads it")
        if real in hidden and endswith(real, ".py") and not writes and not importing_test(caller) and \
                test_module(real):
            die(f"a withheld test's source was read outside its import ({real[len_(work):]})")
        if (writes or real in hidden) and candidate_on_stack(caller):
            what = "wrote" if writes else "read the withheld test"
            die(f"the code under test {what} {real[len_(work):] if startswith(real, work) else real}")

    def test_module(real: str) -> bool:
        """A file pytest imports as a test module (the others in ``test_patch``, a linter's ``.py`` cases,
        are data its tests read)."""
        name = rsplit(real, "/", 1)[-1]
        return name == "conftest.py" or startswith(name, "test_") or endswith(name, "_test.py")

    def importing_test(frame: object) -> bool:
        """Whether the import system (or pytest's rewriter) is on the stack: after the harness compiled the
        tests, nothing else reads a withheld test's source (a C callback, ``weakref.ref(value,
        functools.partial(shutil.copytree, "tests", "/tmp/x"))``, runs stdlib code with no changed frame)."""
        while frame is not None:
            if id_(frame.f_code) in cfg["import_codes"]:
                return True
            frame = frame.f_back
        return False

    def reloading_lines(frame: object) -> bool:
        """Whether ``linecache`` is reading the file: the harness gave each withheld test file a blank entry
        (``_blank_withheld_lines``), so only code that removed it makes linecache read the real one, for
        trusted code (a warning's or a failure's formatting) to leave its text where anyone reads it."""
        while frame is not None:
            if id_(frame.f_code) == cfg["linecache_update"]:
                return True
            frame = frame.f_back
        return False

    def on_file_event(caller: object, args: tuple) -> None:
        for arg in args[:2]:
            path = path_of(arg)
            for real in [] if path is None else places(path, caller):
                if (real in protected_files or real in protected_dirs) and candidate_on_stack(caller):
                    die(f"the code under test changed {path}, which the grader trusts by its name (a test or an "
                        f"unchanged file of the repository, or their directory)")

    def on_rename(caller: object, args: tuple) -> None:
        """A directory renamed by the code under test (``NAMESPACE_EVENTS``): denied."""
        path = path_of(args[0]) if len_(args) else None
        if path is None or not candidate_on_stack(caller):
            return
        for real in places(path, caller):
            try:
                mode = lstat(real).st_mode
            except OSError:
                continue
            if mode & 0o170000 == 0o040000:
                die(f"the code under test renamed the directory {path}, which changes where a checked path leads")

    def on_frame(event: str, caller: object, args: tuple) -> None:
        if not candidate_on_stack(caller):
            return
        if caller is None:
            die(f"the code under test reached the interpreter's frames with no caller ({event})")
        code = id_(caller.f_code)
        if code in allow_frames and (code != cfg["logging_currentframe"] or (
                caller.f_back is not None and id_(caller.f_back.f_code) == cfg["logging_findcaller"])):
            return  # (in a thread too: logging from a worker thread looks up its caller's module)
        where = " from a thread" if get_ident() != main_thread else ""
        die(f"the code under test reached the interpreter's frames{where} ({event})")

    core = [e for e in entries if e[0].split(".")[0] in CORE]

    def integrity(only_core: bool) -> str | None:
        for name, obj, kind, skip, snap in core if only_core else entries:
            if type_(obj) is not kind:
                return f"{name}: its type changed"
            live = module_dict(obj) if kind is ModuleType else class_dict(obj)  # (obj.__dict__ would run a
            # __getattribute__ set on a metaclass of the code under test's, inside the kernel)
            n = 0
            for key, value in live.items():
                if type_(key) is not str_:
                    return f"{name}: a key that is not a string was added"
                if key in snap:
                    n += 1
                    if snap[key] is not value:
                        return f"{name}.{key} was replaced"
                elif key in skip or (kind is ModuleType and (startswith(key, "__") or type_(value) is ModuleType)):
                    continue  # volatile, or a submodule imported later (set on its package)
                elif kind is not ModuleType and key in CLASS_ADDED_OK:
                    continue
                else:
                    return f"{name}.{key} was added"
            if n != len_(snap):
                return f"{name}: an attribute was deleted"
        return None

    def test_code_ok(fn: object, nodeid: str) -> str | None:
        if type_(fn) is MethodType:
            fn = fn.__func__
        if type_(fn) is not FunctionType:
            return "the test is not a plain function"
        code = fn.__code__
        keep.append(code)
        if type_(code) is not CodeType:
            return "the test's code is not a code object"
        pristine = expected.get((code.co_filename, code.co_qualname))
        if pristine is None or pristine != code:
            return f"the test function {code.co_qualname} is not the pristine test code"
        for key, _ in dict_.items(fn.__globals__):
            if type_(key) is not str_:
                return "the test module's globals hold a key that is not a string"
        base = split(nodeid, "[", 1)[0]
        if rsplit(base, "::", 1)[-1] != code.co_name:
            return f"the test id {nodeid} does not name the function that ran ({code.co_name})"
        return None

    mro_of, class_dict = type.__dict__["__mro__"].__get__, type.__dict__["__dict__"].__get__
    qualname_of = type.__dict__["__qualname__"].__get__
    snapshot_classes = frozenset(id_(e[1]) for e in entries if e[2] is not ModuleType)
    testcase_names, plain = cfg["testcase_names"], (int_, bool, str_, type_(None), float)
    wrappers = (staticmethod, classmethod)

    def own_code(fn: object, key: str) -> bool:
        """A function of the test files (their pristine code) or of the unchanged repository, by that name."""
        code = fn.__code__
        if type_(code) is not CodeType or code.co_name != key:
            return False
        want = expected.get((code.co_filename, code.co_qualname))
        return want is not None and want == code or code.co_filename in pristine_files

    def unittest_overrides(testcase: object) -> str | None:
        """What a test class (or a class put in its bases) holds at a name unittest's ``TestCase`` uses
        itself: a method of the test files or the unchanged repository by that name, a plain value
        (``maxDiff``), or an exception class as ``failureException``. unittest's own assertions look up
        ``self._getAssertEqualityFunc``, ``self.fail``, ``self.assertDictEqual`` ... on the test's class,
        which no snapshot holds: the code under test set them there (6 of 20 cachetools tasks passed)."""
        for klass in mro_of(type_(testcase)):
            if id_(klass) in snapshot_classes:
                continue
            for key, value in list_(class_dict(klass).items()):
                if type_(key) is not str_ or key not in testcase_names:
                    continue
                kind = type_(value)
                if kind in wrappers:
                    value = value.__func__
                    kind = type_(value)
                if kind in plain or kind is FunctionType and own_code(value, key) or \
                        key == "failureException" and kind is type:
                    continue
                return f"{qualname_of(klass)}.{key} is not the test file's own"
        return None

    module_defs, test_modules = cfg["module_defs"], []
    builtin_names = cfg["builtin_names"]
    subclass_check = type.__dict__["__subclasscheck__"]
    method_names = frozenset(m for _, classes, _, _, _ in module_defs.values() for methods, _ in classes.values()
                             for m in methods)

    def pristine_def(value: object, path: str, qualname: str, space: dict) -> bool:
        """``value`` is the function the test file's ``def`` at ``qualname`` made, in that module."""
        if type_(value) is not FunctionType:
            return False
        want = expected.get((path, qualname))
        return want is not None and want == value.__code__ and value.__globals__ is space

    def on_module_ready(caller: object) -> None:
        """A rewritten test module's last statement ran (``_mark_ready``): its globals, and each of its classes'
        methods, as they stand now are the ones every test checks (``test_modules_changed``). Its undecorated
        functions and methods must already be the ones its ``def`` made (a thread of the code under test
        could rebind a helper before this statement)."""
        code, back = caller.f_code, caller.f_back
        path = code.co_filename
        want = module_codes.get(path) if type_(path) is str_ else None
        if want is None or want != code or back is None or id_(back.f_code) != cfg["rewrite_exec"]:
            die("the end of a test module's import was announced by other code than the module's")
        space = caller.f_globals
        if type_(space) is not dict_:
            die(f"the test module {path[len_(work):]} runs over globals that are not a dict")
        snapshot_module(path, space)

    def snapshot_module(path: str, space: dict) -> None:
        items = {}
        for key, value in dict_.items(space):
            if type_(key) is not str_:
                die(f"the test module {path[len_(work):]} has a global whose name is not a string")
            items[key] = value
        functions, classes, free, nonlocals, attrs = module_defs.get(path, (frozenset(),) * 5)
        classes = classes or {}
        for name in functions:
            if name not in free and not pristine_def(items.get(name), path, name, space):
                die(f"{path[len_(work):]}: {name} is not the function its def made")
        kept = []
        for cname, (methods, plain_methods) in dict_.items(classes):
            klass = items.get(cname)
            if cname in free or not subclass_check(type, type_(klass)):
                continue
            own = class_dict(klass)
            for key, m in plain_methods:
                if not pristine_def(own.get(key), path, cname + "." + m, space):
                    die(f"{path[len_(work):]}: {cname}.{m} is not the method its def made")
            append(kept, (cname, klass, type_(klass), mro_of(klass),
                          {k: v for k, v in own.items() if k in methods or k not in attrs}, frozenset(k for k in own)))
        held = [v for v in dict_.values(items)] + [v for entry in kept for v in dict_.values(entry[4])]
        append(test_modules, (path, space, items, kept, free, cells_of(held, nonlocals)))
        append(by_path.setdefault(path, []), (items, free))
        problem = imports_changed(path, items, free)
        if problem is not None:
            die(f"{path[len_(work):]}: {problem}")

    def cells_of(functions: list, nonlocals: frozenset) -> list:
        """``(function, index, contents)`` of each closure cell of ``functions`` (a decorator's wrapper holds the
        helper it wraps, a test made by a factory its expected value) that no ``nonlocal`` of the file
        rebinds: ``__closure__`` is read with no audit event, and a cell is writable."""
        out = []
        for fn in functions:
            if type_(fn) is not FunctionType or fn.__closure__ is None:
                continue
            names = fn.__code__.co_freevars
            for i, cell in enumerate(fn.__closure__):
                if i < len_(names) and names[i] in nonlocals:
                    continue
                try:
                    append(out, (fn, i, cell.cell_contents))
                except ValueError:
                    append(out, (fn, i, cells_of))  # an empty cell: cells_of stands for "empty"
        return out

    def cells_changed(where: str, cells: list) -> str | None:
        for fn, i, contents in cells:
            try:
                now = fn.__closure__[i].cell_contents
            except ValueError:
                now = cells_of
            if now is not contents:
                return f"{where}: a closure cell of {fn.__code__.co_qualname} was rebound after the module's import"
        return None

    spaces: dict = {}  # {path: [globals]} of each verifier module the rewriter ran, as it started
    module_imports = cfg["module_imports"]
    watched: list = []  # (package's globals, name, files): a submodule a test reaches through its package

    def module_of(value: object, files: frozenset) -> bool:
        """``value`` is a module whose globals the rewriter ran one of ``files``' pristine code over."""
        if type_(value) is not ModuleType:
            return False
        d = module_dict(value)
        for path in files:
            for space in spaces.get(path, ()):
                if space is d:
                    return True
        return False

    def imports_changed(path: str, items: dict, free: frozenset) -> str | None:
        """A global the module bound by importing a verifier module (``_module_imports``) that is not that
        module, or not the name the module holds."""
        for name, files, attr, chain in module_imports.get(path, ()):
            if name in free or name not in items:
                continue
            value = items[name]
            if attr is None:
                ok = module_of(value, files)
            else:
                ok = False
                for p in files:
                    for space in spaces.get(p, ()):
                        ok = ok or dict_.get(space, attr, module_of) is value
            if not ok:
                return f"{name} is not what the verifier's {files_name(files)} holds (a module put in its place)"
            for parents, attr_, children in chain:
                if not module_of(value, parents):
                    break
                append(watched, (module_dict(value), attr_, children))
                value = dict_.get(module_dict(value), attr_)
        return watched_changed()

    def watched_changed() -> str | None:
        for space, name, files in watched:
            value = dict_.get(space, name, module_of)
            if value is not module_of and not module_of(value, files):
                return f"the package attribute {name} is not the verifier's {files_name(files)}"
        return None

    def files_name(files: frozenset) -> str:
        for path in files:
            return path[len_(work):]
        return "?"

    def test_modules_changed() -> str | None:
        """A test module's global, or a method of one of its classes, that is not what it was at the end of
        the module's import (a name its functions declare ``global`` excepted): the code under test rebound a
        helper a test calls (``sys.modules["tests.test_x"]._check = <agree>``), or shadowed a builtin."""
        problem = watched_changed()
        if problem is not None:
            return problem
        for path, space, items, kept, free, cells in test_modules:
            where = path[len_(work):]
            n = 0
            for key, value in dict_.items(space):
                if type_(key) is not str_:
                    return f"{where}: a global whose name is not a string was added"
                if key in free:
                    continue
                if key in items:
                    n += 1
                    if items[key] is not value:
                        return f"{where}: the global {key} was rebound after the module's import"
                elif key in builtin_names and key not in MODULE_SKIP:
                    return f"{where}: the global {key}, which hides the builtin, was added after the module's import"
            if n != len_([k for k in items if k not in free]):
                return f"{where}: a global was deleted after the module's import"
            problem = classes_changed(where, kept) or cells_changed(where, cells)
            if problem is not None:
                return problem
        return None

    def classes_changed(where: str, kept: list) -> str | None:
        for cname, klass, kind, mro, methods, keys in kept:
            if type_(klass) is not kind or mro_of(klass) is not mro:
                return f"{where}: the class {cname} changed its type or bases"
            own = class_dict(klass)
            for m, value in dict_.items(methods):
                if own.get(m) is not value and not (m in CLASS_ADDED_OK or startswith(m, "_abc_")):
                    return f"{where}: {cname}.{m} was rebound after the module's import"
            for key in own:
                if key in method_names and key not in keys:
                    return f"{where}: {cname}.{key} was added after the module's import"
        return None

    by_path: dict = {}  # {path: [(items, free)]} of each snapshotted verifier module (imported once or more)

    def on_global_read(args: tuple) -> None:
        """A function of a verifier module read one of its module's globals through the harness's ``pin``
        (``_pin_globals``, which names the module's file): the value read must be one that module's import
        bound. No frame is read: the frame chain's ``f_code`` reads are audited events of their own, and
        ``sys._getframe`` made each event cost ~150 us under a test's stack; an event raised by other code
        than ``pin`` can only end the run, not pass a test."""
        name, value, path = args if len_(args) == 3 else (None, None, None)
        entries = by_path.get(path) if type_(path) is str_ else None
        if entries is None or type_(name) is not str_:
            return  # (the module's own import, before its snapshot)
        for items, free in entries:
            if name in free or name not in items or items[name] is value:
                return
        die(f"{path[len_(work):]}: the global {name} a test read was rebound after the module's import")

    def on_unittest_returned(caller: object) -> None:
        """unittest's test method returned (the harness's ``_callTestMethod``, called by ``TestCase.run``
        of the running test, with its own ``testMethod``)."""
        running = verdict["running"]
        if running is None or caller.f_code is not glue_codes.get(UNITTEST_RETURNED) or not chain_ok(caller) or \
                caller.f_back is not running[1] or local(caller, "method") is not local(running[1], "testMethod"):
            die("a unittest test method's return was not announced by the harness's call of it")
        verdict["called"][running[0]] = 1

    def on_outcome(event: str, caller: object, args: tuple) -> None:
        nodeid = args[0] if len_(args) else None
        if type_(nodeid) is not str_ or verdict["finished"]:
            die(f"a malformed {event} event")
        want = glue_codes.get(event)
        if want is None or caller.f_code is not want or not chain_ok(caller):
            die(f"{event} for {nodeid} did not come from the harness's own call of the test")
        problem = test_modules_changed()
        if problem is not None:
            die(f"{nodeid}: {problem}")
        if event in ("posttrain.begin", "posttrain.begin_unittest"):
            if nodeid in verdict["begun"]:
                die(f"the test {nodeid} started twice")
            verdict["begun"][nodeid] = 1
            verdict["frames"][nodeid] = caller if event == "posttrain.begin" else caller.f_back
            verdict["running"] = (nodeid, verdict["frames"][nodeid])
            return
        verdict["running"] = None
        runner = caller if event == "posttrain.returned" else caller.f_back
        if verdict["frames"].get(nodeid) is not runner or nodeid in verdict["passed"]:
            die(f"the test {nodeid} returned without its own start")
        if event == "posttrain.returned_unittest" and nodeid not in verdict["called"]:
            die(f"unittest reported {nodeid} a success, but its test method did not return")
        if event == "posttrain.returned_unittest":
            problem = unittest_overrides(local(caller, "testcase"))
            if problem is not None:
                die(f"{nodeid}: {problem}")
        fn = local(runner, "testfunction" if event == "posttrain.returned" else "testMethod")
        problem = test_code_ok(fn, nodeid) or integrity(only_core=True)
        if problem is not None:
            die(f"{nodeid}: {problem}")
        verdict["passed"][nodeid] = 1

    def on_report(caller: object, args: tuple) -> None:
        if caller.f_code is not glue_codes.get("posttrain.report") or not chain_ok(caller):
            die("a test report did not come from pytest's own report")
        if len_(args) == 3 and all(type_(a) is str_ for a in args):
            verdict["reports"].append(join(" ", (repr_(args[0]), args[1], args[2])))

    def on_finish(caller: object, args: tuple) -> None:
        if caller.f_code is not glue_codes.get("posttrain.finish") or caller.f_back is None or \
                caller.f_back.f_code is not bottom or verdict["finished"]:
            die("the end of the run was not announced by the harness")
        problem = integrity(only_core=False) or test_modules_changed()
        if problem is not None:
            die(problem)
        verdict["finished"] = True
        rc = args[0] if len_(args) and type_(args[0]) is int_ else -1
        lines = [join(" ", ("passed", repr_(k))) for k in verdict["passed"]]
        lines += [join(" ", ("begun", repr_(k))) for k in verdict["begun"]]
        lines += [join(" ", ("report", r)) for r in verdict["reports"]]
        emit("final", repr_(join("\n", [join(" ", ("exit", repr_(rc)))] + lines)))

    def on_attr(event: str, caller: object, args: tuple) -> None:
        name = args[1] if len_(args) >= 2 and type_(args[1]) is str_ else None
        if name is None:
            return
        if event == "object.__setattr__":
            if name in ("__code__", "__defaults__", "__kwdefaults__"):
                die(f"a function's {name} was replaced")
        elif name in FRAME_ATTRS:
            on_frame(event, caller, args)
        elif name == "__code__" and type_(args[0]) is FunctionType and args[0].__code__.co_filename in hidden \
                and startswith(args[0].__code__.co_name, "test") and candidate_on_stack(caller):
            die("the code under test read a withheld test's code")  # (visible tests' code is the agent's to read)

    def on_code(event: str, caller: object, args: tuple) -> None:
        if event == "compile":
            on_compile(caller, args)
        elif event == "import":
            name = args[0] if len_(args) and type_(args[0]) is str_ else ""
            if name in NO_REIMPORT:
                die(f"the grader's run imports {name} afresh")
            if len_(args) >= 2 and args[1] is not None:  # a file only where an extension is loaded (a str subclass
                where = path_of(args[1])  # as ``spec.origin`` is one too: no path the kernel reads)
                if where is None or not startswith(resolve(where), EXTENSION_FROM):
                    die(f"a compiled extension module was loaded from {where}: machine code no check of the run sees")
        elif event == "exec":
            on_exec(caller, args)
        elif startswith(event, "marshal."):
            if not cached_on_disk(caller, args) and (candidate_on_stack(caller) or import_machinery(caller)):
                die(f"code was loaded from bytecode that is not the standard library's ({event})")
        elif candidate_on_stack(caller):
            die(f"the code under test built code objects ({event})")

    def trusted_name(name: object) -> bool:
        return type_(name) is not str_ or startswith(name, "/usr/") or startswith(name, "<frozen ") or \
            name in verifier_files or name in pristine_files

    def on_compile(caller: object, args: tuple) -> None:
        """Code compiled under a name the kernel trusts must be that file's bytes, with or without changed
        code on the stack: a loader of the code under test (its ``get_data`` returned before the compile)
        made ``/work/shop/discount.py`` code of other bytes, imported later by a weakref callback, and that
        code, trusted as unchanged, started ``cat`` on the withheld test. A syntax tree (the event carries
        no name) is compiled under a trusted name only by pytest's rewriter, of a verifier test file whose
        module code the exec check compares with the pristine one."""
        source, name = (args[0], args[1]) if len_(args) >= 2 else (None, None)
        if candidate_on_stack(caller):
            if trusted_name(name) and not (importing(caller) and on_disk(name, source, 0)):
                die("the code under test compiled code under another file's name")
            return
        if type_(source) is str_:
            source = encode(source, "utf-8", "surrogateescape")
        if type_(source) in (bytes_, memoryview_):
            path = path_of(name)  # (a withheld file is not read inside the kernel: its module code is
            # compared when it runs, on_exec)
            if path is not None and path not in hidden and trusted_name(path) and not on_disk(path, source, 0):
                die(f"code compiled under the name {path} is not that file's bytes")
        elif caller is not None and id_(caller.f_code) == cfg["rewrite_compile"]:
            strfn = local(caller, "strfn")
            if type_(strfn) is not str_ or strfn not in module_codes:
                die(f"pytest's rewriter compiled a module that is not a verifier test "
                    f"({strfn if type_(strfn) is str_ else type_(strfn).__name__})")

    def on_exec(caller: object, args: tuple) -> None:
        """A module pytest's rewriter compiled, or a withheld test module, runs only if it is the pristine
        test module's code (compiled before the code under test ran): a swapped ``rewrite_asserts``
        (restored before the first test's check) or the harness's helpers could add module-level code
        that runs as the verifier's."""
        code = args[0] if len_(args) else None
        rewriter = caller is not None and id_(caller.f_code) == cfg["rewrite_exec"]
        if type_(code) is not CodeType:
            if rewriter:
                die("pytest's rewriter ran something that is not a code object")
            return
        path = code.co_filename
        if not rewriter and code.co_name == "<module>" and path in module_codes and caller is not None:
            args_of = local(caller, "args")  # the import system's _call_with_frames_removed(exec, code, globals)
            if type_(args_of) is tuple and len_(args_of) == 2 and args_of[0] is code and module_codes[path] != code:
                die(f"the verifier module {path[len_(work):]} was imported without the grader's rewriting (a "
                    f"finder or loader put before pytest's, or a cell of its choice rebound)")
        if not rewriter and not (code.co_name == "<module>" and path in hidden):
            return
        want = module_codes.get(path)
        if want is None or want != code:
            die(f"the test module {path} is not the pristine test code")
        module = local(caller, "module") if rewriter else None
        if type_(module) is ModuleType:  # (the rewriter's exec_module(module): its globals, before they run)
            append(spaces.setdefault(path, []), module_dict(module))

    def import_machinery(frame: object) -> bool:
        """Whether the import system (or pytest's rewriter, which reads its own cached bytecode) is on the
        stack: bytecode it loads becomes code trusted by its file's name, so it must be the standard
        library's own (a ``.pyc`` renamed into a ``__pycache__``, a sourceless ``.pyc``, a zip archive)."""
        while frame is not None:
            where = frame.f_code.co_filename
            if id_(frame.f_code) in cfg["import_codes"] or id_(frame.f_code) == cfg["read_pyc"] or \
                    type_(where) is str_ and (startswith(where, "<frozen importlib") or
                                              startswith(where, "<frozen zipimport")):
                return True
            frame = frame.f_back
        return False

    def on_disk(name: object, source: object, skip: int) -> bool:
        """Whether ``source`` (bytes) is the file ``name`` as it is on disk past its first ``skip`` bytes,
        read with the kernel's own system calls: a loader of the code under test can hand the import
        system any bytes under any file's name, and the code would be trusted by that name."""
        if type_(name) is not str_ or type_(source) not in (bytes_, memoryview_):
            return False
        try:
            fd = open_(name, 0)
        except (OSError, ValueError):
            return False
        chunks = []
        try:
            while True:
                chunk = read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError:
            return False
        finally:
            close(fd)
        return join_bytes(b"", chunks)[skip:] == bytes_(source)

    def cached_on_disk(caller: object, args: tuple) -> bool:
        """A ``marshal.loads`` by the import system: of the standard library's own cached bytecode."""
        path = local(caller, "bytecode_path") if caller is not None else None
        return type_(path) is str_ and startswith(path, "/usr/") and endswith(path, ".pyc") and \
            len_(args) > 0 and on_disk(path, args[0], 16)

    def importing(frame: object) -> bool:
        """Whether ``frame`` is the import system compiling or loading a module (between it and the
        nearest changed code there is ``SourceLoader.get_code`` or pytest's rewriter): the code under
        test may import; the file names are then the files' own."""
        while frame is not None and not is_candidate(frame.f_code):
            if id_(frame.f_code) in cfg["import_codes"]:
                return True
            frame = frame.f_back
        return False

    def on_entered(caller: object) -> None:
        """A withheld test starts. Only the harness's own call of the running test may start it: between
        the test and the harness's frame only code that is neither changed nor a test (pytest, unittest,
        a decorator of the standard library), and the test the one the run is at. A function that stdlib
        code calls later (a ``weakref.finalize`` released by the tests' own frame, a pytest hook) has no
        changed frame under it, so no changed frame on the stack was not enough. A withheld test may
        call another test its code names (``test_b()`` in ``test_a``)."""
        if candidate_on_stack(caller):
            die("the code under test ran a withheld test")
        code, back = caller.f_code, caller.f_back
        name = code.co_name
        if back is not None and type_(back.f_code.co_filename) is str_ and back.f_code.co_filename in hidden and \
                type_(name) is str_ and name in back.f_code.co_names:
            return
        running = verdict["running"]
        if running is None:
            die(f"the withheld test {name} ran outside the harness's call of a test")
        nodeid, runner = running
        frame = back
        while frame is not runner:
            if frame is None or frame.f_code.co_filename in verifier_files:
                die(f"the withheld test {name} ran inside another call than the harness's of {nodeid}")
            frame = frame.f_back
        if split(rsplit(nodeid, "::", 1)[-1], "[", 1)[0] != name:
            die(f"the withheld test {name} ran while the harness ran {nodeid}")
        direct = back is runner or (back.f_back is runner and id_(back.f_code) == cfg["unittest_call"])
        if direct and nodeid in verdict["entered"]:
            die(f"the withheld test {nodeid} ran before the harness's call of it")
        verdict["entered"][nodeid] = 1

    fork_exec, spawn_code = cfg.pop("fork_exec"), cfg.pop("spawn_code")
    create_builtin, builtin_code = cfg.pop("create_builtin"), cfg.pop("builtin_code")

    def on_builtin(caller: object, args: tuple) -> None:
        name, box = args if len_(args) == 2 else (None, None)
        if caller is None or caller.f_code is not builtin_code or type_(box) is not list_ or len_(box) or \
                type_(name) is not str_:
            die("a built-in module was created around the harness's create_builtin")
        if name in NO_REIMPORT:
            die(f"the code under test created a fresh {name} module")
        append(box, create_builtin)

    def on_spawn(event: str, caller: object, args: tuple) -> None:
        """A program starts: refused with changed code on the stack (or in a thread); the harness's
        ``fork_exec`` gets the real one handed into its own list, never reachable from an attribute."""
        if candidate_on_stack(caller):
            if event == "os.fork" or event == "os.forkpty":
                die(f"the code under test forked the test process ({event})")
            die(f"the code under test started another program ({event}), which would run outside the grader")
        if event == SPAWN:
            box = args[0] if len_(args) else None
            if caller.f_code is not spawn_code or type_(box) is not list_ or len_(box):
                die("a program was started around the harness's fork_exec")
            append(box, fork_exec)

    approx_made: dict = {}  # {id: approx} of what the tests' pytest.approx made (kept alive: ids stay theirs)

    def on_approx(event: str, caller: object, args: tuple) -> None:
        """The harness's ``pytest.approx`` made an approx (its own code raised the event), or the guard asks
        whether one was (the answer appended to the list it passed)."""
        if event == APPROX:
            if caller is None or caller.f_code is not cfg["approx_code"] or len_(args) != 1:
                die("an approx was announced by other code than the harness's pytest.approx")
            approx_made[id_(args[0])] = args[0]
        elif len_(args) == 2 and type_(args[1]) is list_ and not len_(args[1]):
            append(args[1], approx_made.get(id_(args[0])) is args[0])

    def on_posttrain(event: str, caller: object, args: tuple) -> None:
        if caller is None or getpid() != main_pid or get_ident() != main_thread:
            die(f"{event} from a copy of the test process (os.fork) or another thread")
        if event == ENTERED:
            on_entered(caller)
        elif event == "posttrain.report":
            on_report(caller, args)
        elif event == "posttrain.finish":
            on_finish(caller, args)
        elif event == UNITTEST_RETURNED:
            on_unittest_returned(caller)
        elif event == MODULE_READY:
            on_module_ready(caller)
        else:
            on_outcome(event, caller, args)

    handlers = {"open": on_open, "sys._getframe": on_frame, "object.__getattr__": on_attr,
                "object.__setattr__": on_attr, "code.__new__": on_code, "marshal.loads": on_code,
                "marshal.load": on_code, "compile": on_code, "import": on_code,
                "exec": on_code}

    def dispatch(event: str, args: tuple, caller: object) -> None:
        if event == GLOBAL_READ:  # (first: one for each global a test reads; from any thread)
            on_global_read(args)
            return
        for prefix in ALWAYS_DENIED:
            if startswith(event, prefix):
                if event == "sys.settrace" and id_(caller.f_code) == cfg["doctest_run"] and \
                        not candidate_on_stack(caller):
                    return  # doctest restores the trace function it found: None, since none can be set
                die(f"the code under test used {event}")
        handler = handlers.get(event)
        if handler is not None:
            handler(event, caller, args)
        elif event in FILE_EVENTS:
            on_file_event(caller, args)
            if event == "os.rename":
                on_rename(caller, args)
        elif event in NAMESPACE_EVENTS:
            if candidate_on_stack(caller):
                die(f"the code under test used {event}, which changes where a checked path leads")
        elif event in SPAWN_EVENTS:
            on_spawn(event, caller, args)
        elif event == BUILTIN:
            on_builtin(caller, args)
        elif event == APPROX or event == APPROX_MADE:
            on_approx(event, caller, args)
        elif startswith(event, "posttrain."):
            on_posttrain(event, caller, args)

    def nested(event: str, args: tuple) -> None:
        """An event while the hook runs: the hook's own frame reads, or something running inside it."""
        for prefix in ALWAYS_DENIED:
            if startswith(event, prefix):
                die(f"{event} inside the grader")
        if event == "sys._getframe" and len_(args) and type_(args[0]) is FrameType and above_kernel(args[0]):
            die("a frame above the grader was requested while it ran")
        if event == "object.__getattr__" and len_(args) == 2 and type_(args[1]) is str_ and \
                args[1] in FRAME_ATTRS:
            die("a frame was requested while the grader ran")
        if startswith(event, "posttrain.") or event in FILE_EVENTS or event in NESTED_DENIED or \
                event in NAMESPACE_EVENTS:
            die(f"{event} while the grader ran")  # the kernel does none of these itself
        if event == "open" and len_(args) and type_(args[0]) is not int_:
            path = path_of(args[0])
            real = None if path is None else resolve(path)
            flags = args[2] if len_(args) > 2 and type_(args[2]) is int_ else 0
            if real is None or real in hidden or proc_private(real) or (flags & 0o3 or flags & 0o1100) and (
                    real in protected_files or real in protected_dirs):
                die("a file the grader guards was opened while it ran")

    def hook(event: str, args: tuple) -> None:
        if type_(event) is not str_ or event == "builtins.id":
            return  # (no check reads id(): at ~0.2 ms a hook call, deepcopy's 42,000 took 20 s of a 60 s run)
        me = get_ident()
        if me in busy:
            nested(event, args)
            return
        busy.add(me)
        if not collector[0]:  # no cyclic GC while the kernel runs: its callbacks and finalizers would run
            collector[1] = gc_isenabled()  # foreign code inside it, where nested() alone judges events
            gc_disable()
        collector[0] += 1
        try:
            try:
                caller = None if event == GLOBAL_READ else getframe(1)  # the frame that did the audited operation
            except ValueError:
                caller = None  # none: C code raised it with no Python frame (a thread started on a builtin)
            dispatch(event, args, caller)
        except BaseException as e:  # noqa: BLE001 - the hook never raises: its own failure ends the run as infra
            cut = cut_short.get(id_(type_(e)))
            if cut is not None:  # the code under test's doing, never the grader's error (below)
                die(f"the grader's check of {event} {cut}", kind="cut_short")
            die(f"harness error: {type_(e).__name__}", kind="harness_error")
        finally:
            collector[0] -= 1
            if not collector[0] and collector[1]:
                gc_enable()
            busy.discard(me)

    for fn in (emit, die, is_candidate, candidate_on_stack, above_kernel, chain_ok, local, resolve, path_of,
               proc_private, open_dirs, places, on_open, check_open, test_module, importing_test, reloading_lines, on_file_event, on_frame, integrity, test_code_ok, on_outcome, on_report,
               on_finish, on_attr, on_code, trusted_name, on_compile, on_exec, import_machinery, on_disk, cached_on_disk, importing, on_entered, on_posttrain, dispatch,
               nested, hook, on_spawn, on_builtin, on_approx, on_unittest_returned, unittest_overrides, own_code, pristine_def, on_module_ready,
               test_modules_changed, snapshot_module, classes_changed, cells_of, cells_changed, module_of,
               imports_changed, watched_changed, files_name, on_global_read):
        kernel_codes.add(id_(fn.__code__))
        trusted.pop(id_(fn.__code__), None)  # kernel frames are never part of a trusted chain
    emit("ready", repr_(cfg.get("ready", "")))
    return hook


def _no_signal(signalnum, handler):  # noqa: ANN001, ANN202 - the stdlib's signature
    raise RuntimeError("posttrain's repo grader runs without changes to signal handling")


def _install_spawn_guard(audit: object) -> tuple[object, object]:
    """``(the real fork_exec, the code of its replacement)``: ``_posixsubprocess.fork_exec`` (what
    ``subprocess`` and ``multiprocessing`` call) becomes a function that asks the kernel for the real
    one (``SPAWN``) each call, so that no attribute or closure holds it."""
    import _posixsubprocess
    import subprocess

    original = _posixsubprocess.fork_exec

    def fork_exec(*args):  # noqa: ANN002, ANN202 - the C function's signature
        box: list = []
        audit(SPAWN, box)
        return box.pop()(*args)

    _posixsubprocess.fork_exec = subprocess._fork_exec = fork_exec
    return original, fork_exec.__code__


def _install_builtin_guard(audit: object) -> tuple[object, object]:
    """``(the real _imp.create_builtin, the code of its replacement)``: the replacement reads the
    spec's name once and asks the kernel (``BUILTIN``), which refuses the modules whose fresh copy
    would bring back what the harness took away (``NO_REIMPORT``)."""
    import _imp
    import types

    original = _imp.create_builtin

    def create_builtin(spec):  # noqa: ANN001, ANN202 - the C function's signature
        name = spec.name
        box: list = []
        audit(BUILTIN, name, box)
        return box.pop()(types.SimpleNamespace(name=name))

    _imp.create_builtin = create_builtin
    return original, create_builtin.__code__


def _install_signal_guard() -> None:
    """Replace ``signal.signal`` (and the C function under it) by a refusal that holds no reference to
    the original: a Python handler is handed the interrupted frame with no audit event, and that
    frame could be the kernel's. (A fresh ``_signal`` from ``_imp.create_builtin`` is
    refused: ``_install_builtin_guard``.)"""
    import _signal
    import signal as signal_mod

    _signal.signal = _no_signal
    signal_mod.signal = _no_signal


GUARD_SLOT = "\x00posttrain:guard"
AUDIT_SLOT = "\x00posttrain:audit"
"""Constants the rewritten test code calls, bound after compiling to the guard and to ``sys.audit``
themselves (``_bind``): a code object's constants cannot change (a new code object, or a new
``__code__``, is denied by the kernel), so the code under test cannot swap them for a call and put
them back, as it could a builtin or a module global."""
ENTERED = "posttrain.test_entered"
"""The event a withheld test raises first thing (``_mark_tests``): the kernel refuses it while changed
code is on the stack, in a thread, or in a fork, so the code under test cannot run a withheld test to
read the values its failure reports."""
MODULE_READY = "posttrain.module_ready"
"""The event a rewritten test module raises as its last statement (``_mark_ready``): the kernel then
snapshots the module's globals and its classes' methods, before the code under test can run again."""
PIN_SLOT = "\x00posttrain:pin"
"""The constant a verifier module's function reads its module's globals through (``_pin_globals``)."""
GLOBAL_READ = "posttrain.global_read"
"""The event of the harness's ``pin``: a function of a verifier module read one of its module's globals."""
MODULE_HOOKS = frozenset({"setup_module", "teardown_module", "setup", "teardown"})
"""Module-level hooks that pytest calls with the module: the names they set on it are the tests' state."""
MODULE_SKIP = ("__warningregistry__",)
"""Names a test module's globals may gain after its import: ``warnings`` keeps its registry there; pytest
adds its xunit fixtures under names holding ``__pytest_`` (``_Module__pytest_setup_module``)."""
MAX_GUARD_ITEMS = 1 << 20
APPROX = "posttrain.approx"
"""The event of the harness's ``pytest.approx``: the kernel keeps each approx a test made."""
APPROX_MADE = "posttrain.approx_made"
"""The guard's question to the kernel: did a test's ``pytest.approx`` make this object (``[True]``)?"""
SEAL = "\x00posttrain:seal:"


VALUE_DUNDERS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__", "__bool__", "__len__",
                 "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
                 "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__neg__", "__pos__",
                 "__abs__", "__round__")
"""The methods through which a value answers a test's comparison or arithmetic."""
MATCHER_QUALNAMES = frozenset({"_ANY.__eq__", "_ANY.__ne__"})
"""Standard-library (and ``mock`` backport) methods that agree with anything, refused wherever they sit;
the CPython test suite's helpers (``test.support.ALWAYS_EQ``, a path with ``/test/``) too."""


def _class_methods() -> tuple[frozenset, tuple]:
    """``({(id(class), name, id(function))}, the classes)``: every function each class of every loaded
    module holds, under its name, before any candidate code runs. The guard accepts a standard-library
    method only where this says it sat: it once looked the method's class up by name in the method's
    module's globals, which the code under test rebinds (``xml.etree.ElementTree.QName = <its float
    subclass>`` put ``QName.__eq__``, reading a class attribute that always agrees, on it: 6 of 6)."""
    import types

    out, classes = set(), []
    for module in list(sys.modules.values()):
        if type(module) is not types.ModuleType:
            continue
        for value in list(vars(module).values()):
            if not isinstance(value, type) or type(vars(value)) is not types.MappingProxyType:
                continue
            classes.append(value)
            for key, fn in list(vars(value).items()):
                fn = fn.__func__ if isinstance(fn, staticmethod | classmethod) else fn
                if type(key) is str and type(fn) is types.FunctionType:
                    out.add((id(value), key, id(fn)))
    return frozenset(out), tuple(classes)


def _make_guard(pristine: frozenset, test_files: frozenset, pristine_classes: frozenset,  # noqa: C901
                audit: object) -> object:
    """``guard(value) -> value``: raises AssertionError when ``value`` (or anything it contains) answers
    comparisons or arithmetic through a method the diff added, so an object whose ``==`` always agrees,
    or whose ``-`` always gives 0, never passes a test (one closure, as ``_make_kernel``).

    The guard runs none of the value's code: types are compared by id, subclasses found by the C
    subtype test, class dictionaries read item by item (``isinstance`` once read a ``__class__``
    property that set ``__eq__`` after the check; a metaclass ``__hash__`` and a non-string key's
    ``__eq__`` ran in lookups). ``pristine_classes`` is ``{(module, qualname)}`` (``_class_names``).

    A method is the diff's when it is not the standard library's or pytest's (a path under /usr, or a
    frozen module), not a builtin slot, not the verifier's tests' own, and not a function of the
    pristine repository at the same qualified name (a fixed body of an existing ``__eq__`` is fine; a
    new one, a lambda, a builtin such as ``slice`` put in its place, or one set on a class at run time
    are not); ``dataclasses``' generated methods count as their class's, so they pass only on a
    pristine class. Matchers that agree with anything are refused as values: ``unittest.mock.ANY``, a
    pytest ``approx`` with a tolerance of a million or more. Everything the guard uses is bound as a
    default argument (setting ``__defaults__`` is denied by the kernel), never a global name or a
    closure's cell (``__globals__`` and ``__closure__`` are read with no audit event, and both are
    writable); whether a test made an approx is the kernel's to say (``APPROX_MADE``)."""
    import collections
    import functools
    import math
    import types
    import unittest.mock

    from _pytest.python_api import ApproxBase

    mro_of = type.__dict__["__mro__"].__get__
    dict_of = type.__dict__["__dict__"].__get__
    module_of, qualname_of = type.__dict__["__module__"].__get__, type.__dict__["__qualname__"].__get__
    items_of = types.MappingProxyType.items
    subclass = type.__dict__["__subclasscheck__"]  # (base, t): the C subtype test, no __class__ read
    scalars = frozenset(id(t) for t in (int, float, complex, bool, str, bytes, bytearray, type(None),
                                        type(Ellipsis), type(NotImplemented), range))
    seqs = (list, tuple, set, frozenset, collections.deque, type({}.keys()), type({}.values()), type({}.items()))
    """Containers whose C ``==`` compares their items (read through the base type's C iterator); a slice and a
    ``SimpleNamespace`` (its ``__dict__``) too: ``deque([<agrees>]) == deque([4.0])`` passed (3 of 3)."""
    slot_types = frozenset(id(t) for t in (type(object.__eq__), type(dict.__contains__),
                                           type(dict.__dict__["fromkeys"])))
    any_type = type(unittest.mock.ANY)
    approx_types = frozenset(id(c) for c in vars(__import__("_pytest.python_api", fromlist=["x"])).values()
                             if isinstance(c, type) and issubclass(c, ApproxBase))
    names = frozenset(VALUE_DUNDERS)
    ordering = frozenset(id(f) for pairs in functools._convert.values() for _, f in pairs)
    registry, registered = _class_methods()
    member_get, getset_get = types.MemberDescriptorType.__get__, types.GetSetDescriptorType.__get__
    registered_ids = frozenset(id(c) for c in registered)
    namespace_dict = vars(types.SimpleNamespace)["__dict__"]
    cached_dict = vars(functools.cached_property)["__dict__"]

    def pristine_class(klass, _classes=pristine_classes, _type=type, _str=str, _module=module_of,
                       _qualname=qualname_of) -> bool:
        module, qualname = _module(klass), _qualname(klass)
        return _type(module) is _str and _type(qualname) is _str and (module, qualname) in _classes

    def static(klass, _flags=type.__dict__["__flags__"].__get__) -> bool:
        return not _flags(klass) & (1 << 9)  # not Py_TPFLAGS_HEAPTYPE: a C type, which Python cannot change

    def foreign(klass, name, fn, _func=types.FunctionType, _slots=slot_types, _pristine=pristine, _type=type,
                _str=str, _startswith=str.startswith, _tests=test_files, _pclass=pristine_class,
                _static=static, _id=id, _qualname=qualname_of, _names=names, _ordering=ordering,
                _matchers=MATCHER_QUALNAMES, _getattr=getattr, _registry=registry, _keep=registered) -> str | None:
        """A method is judged by what it is and where it sits: a C type's method under its own name, a
        function of the repository or the tests named as a value dunder, a standard-library method in its
        own class. A function put in a class under another name answered for it: ``__eq__ = float.__add__``
        (``x + y``, truthy), ``__eq__ = <a second def of a repository function's name>`` returning True,
        ``__eq__ = copy._deepcopy_atomic`` (returns ``self``) all passed every test with no fix."""
        if _id(_type(fn)) in _slots and _static(_getattr(fn, "__objclass__", klass)):
            if _getattr(fn, "__name__", None) == name:
                return None  # a C type's own method put in a class (int.__eq__ on an int subclass)
            return f"{_qualname(klass)}.{name} is the C method {_getattr(fn, '__name__', None)!r}"
        if _type(fn) is not _func:
            return f"{_qualname(klass)}.{name} is a {_qualname(_type(fn))}"
        code = fn.__code__
        where, qualname, own = code.co_filename, code.co_qualname, code.co_name
        dunder = _type(own) is _str and (own == name or own in _names)
        if _type(where) is _str and (_startswith(where, "/usr/") or _startswith(where, "<frozen ")):
            if _id(fn) in _ordering:
                return None  # functools.total_ordering's: they call the class's other methods, checked too
            if "/test/" in where or qualname in _matchers:
                return f"{_qualname(klass)}.{name} is a matcher that agrees with anything ({qualname})"
            if (_id(klass), name, _id(fn)) in _registry:
                return None  # (where it sat before the code under test ran: a module's globals are rebindable)
            return f"{_qualname(klass)}.{name} is {qualname} of the standard library, outside its own class"
        if (_type(where) is _str and where in _tests or (where, qualname) in _pristine) and dunder:
            return None  # (a fixed body of the repository's own dunder at its qualified name is fine)
        if where == "<string>" and _startswith(qualname, "__create_fn__.<locals>.") and _pclass(klass):
            return None  # dataclasses' generated methods, on a class of the pristine repository
        return f"{_qualname(klass)}.{name} is not the repository's own"

    def own_methods(t, _mro=mro_of, _dict=dict_of, _items=items_of, _foreign=foreign, _names=names, _type=type,
                    _str=str, _list=list, _static=static, _qualname=qualname_of) -> str | None:
        """Read with no lookup by name: a key of another type than ``str`` in a class's dictionary has its
        own ``__eq__``, which a lookup of ``"__eq__"`` would run (and which the interpreter's would too)."""
        for klass in _mro(t):
            if _static(klass):
                continue
            entries = _list(_items(_dict(klass)))
            for key, _ in entries:
                if _type(key) is not _str:
                    return f"{_qualname(klass)} has a key that is not a string"
            for key, value in entries:
                problem = _foreign(klass, key, value) if key in _names else None
                if problem is not None:
                    return problem
        return None

    def matcher(v, t, _any=any_type, _approx=approx_types, _subclass=subclass, _audit=audit, _id=id,
                _approx_base=ApproxBase, _isfinite=math.isfinite, _type=type, _int=int, _float=float,
                _qualname=qualname_of, _getattribute=object.__getattribute__, _made=APPROX_MADE) -> str | None:
        if t is _any:
            return "unittest.mock.ANY agrees with everything"
        if _subclass(_approx_base, t):
            if _id(t) not in _approx:
                return f"{_qualname(t)} is not pytest's own approx"
            box: list = []
            _audit(_made, v, box)  # the kernel keeps what the tests' approx made (a dict here was writable)
            if box != [True]:  # the code under test's approx(x, abs=999999) agreed with every ==
                return "an approx that no test made (pytest.approx, called by a test)"
            d = _getattribute(v, "__dict__")
            for key in ("abs", "rel"):
                tol = d.get(key)
                if tol is not None and (_type(tol) is not _int and _type(tol) is not _float or not _isfinite(tol)
                                        or tol >= 1e6):
                    return f"an approx with {key}={tol!r} agrees with anything"
        return None

    def reader_ok(fn, _func=types.FunctionType, _type=type, _str=str, _startswith=str.startswith,
                  _pristine=pristine, _tests=test_files) -> bool:
        """A function that reads an attribute for a comparison: the standard library's, the tests', or the
        pristine repository's at its qualified name."""
        if _type(fn) is not _func:
            return False
        code = fn.__code__
        where = code.co_filename
        return _type(where) is _str and (_startswith(where, "/usr/") or _startswith(where, "<frozen ") or
                                         where in _tests or (where, code.co_qualname) in _pristine)

    def foreign_getter(d, kind, _mro=mro_of, _dict=dict_of, _items=items_of, _static=static, _list=list, _type=type,
                       _str=str, _reader=reader_ok, _subclass=subclass, _cached=functools.cached_property,
                       _cached_dict=cached_dict, _getset_get=getset_get, _plain=dict) -> object:
        """The code a descriptor runs when a comparison reads it, if it is not the standard library's, the
        tests' or the pristine repository's: a ``cached_property``'s function (``_numerator =
        cached_property(<agrees>)`` on a ``Fraction`` subclass), or a Python ``__get__`` of its type."""
        if _subclass(_cached, kind):
            inst = _getset_get(_cached_dict, d, kind)
            fn = _plain.get(inst, "func") if _type(inst) is _plain else None
            if not _reader(fn):
                return fn or kind
        for klass in _mro(kind):
            if _static(klass):
                continue
            for key, value in _list(_items(_dict(klass))):
                if _type(key) is _str and key == "__get__" and not _reader(value):
                    return value
        return None

    def state(v, t, _mro=mro_of, _dict=dict_of, _items=items_of, _static=static, _list=list, _type=type, _str=str,
              _id=id, _member=types.MemberDescriptorType, _getset=types.GetSetDescriptorType, _member_get=member_get,
              _getset_get=getset_get, _func=types.FunctionType, _names=names, _plain=dict, _prop=property,
              _reader=reader_ok, _qualname=qualname_of, _registered=registered_ids,
              _hooks=frozenset({"__getattr__", "__getattribute__"}), _methods=(staticmethod, classmethod),
              _startswith=str.startswith, _getter=foreign_getter, known=False) -> tuple:
        """``(problem, values)``: what an instance of a Python class holds (its ``__dict__``'s values, its
        slots, read through the C descriptors; a class attribute of a class the standard library did not
        define before the run) when one of its classes answers comparisons in Python code, which reads them:
        ``Fraction``'s ``==`` and ``float()`` read ``_numerator``, which held an object that always agrees (6 of
        6). A property or ``__getattr__`` such a value reads through must be the standard library's, the
        tests' or the pristine repository's. ``known``: this guard call already read ``t``'s readers and found
        them fine (what an instance holds is still read, instance by instance)."""
        klasses = [k for k in _mro(t) if not _static(k)]
        if not any(_type(key) is _str and key in _names and _type(d) is _func
                   for k in klasses for key, d in _list(_items(_dict(k)))):
            return None, []
        out = []
        for klass in klasses:
            own = _id(klass) in _registered
            for key, d in _list(_items(_dict(klass))):
                kind = _type(d)
                if kind is _member:
                    try:
                        out.append(_member_get(d, v, t))
                    except AttributeError:
                        pass
                elif kind is _getset:
                    if key == "__dict__":
                        try:
                            inst = _getset_get(d, v, t)
                        except AttributeError:
                            continue
                        if _type(inst) is _plain:
                            out.extend(_plain.values(inst))
                elif own or kind in _methods or _type(key) is _str and _startswith(key, "__") and key not in _hooks:
                    continue
                elif kind is _prop or kind is _func and key in _hooks:
                    fn = None if known else d if kind is _func else d.fget
                    if fn is not None and not _reader(fn):
                        return f"{_qualname(klass)}.{key} reads an attribute through code the diff added", []
                elif kind is not _func and not known and _getter(d, kind) is not None:
                    return f"{_qualname(klass)}.{key} reads an attribute through a descriptor the diff added", []
                elif kind is not _func:
                    out.append(d)  # a class attribute an instance reads
        return None, out

    def guard(value, _own=own_methods, _matcher=matcher, _type=type, _scalars=scalars, _seqs=seqs, _dict=dict,
              _list=list, _id=id, _subclass=subclass, _max=MAX_GUARD_ITEMS, _approx_base=ApproxBase, _set=set,
              _getattribute=object.__getattribute__, _error=AssertionError, _state=state, _static=static,
              _slice=slice, _namespace=types.SimpleNamespace, _ns_dict=namespace_dict,
              _member_get=member_get):
        """Runs none of the value's code: types are compared by identity (a metaclass's ``__hash__`` or
        ``__eq__`` ran in a set lookup) and subclasses found by the C subtype test (``isinstance`` reads
        a ``__class__`` property, which set ``__eq__`` on the class after its check)."""
        todo, seen, n = [value], _set(), 0
        checked = {}  # id -> type: a type whose methods and readers this call found the repository's own. Reading
        # a function's __code__ is an audit event, and the kernel's hook walks the stack at each: 2,000 items of
        # one class in a cache took 11-23 s of a 60 s test run (cachetools' *_maxsize tests). Nothing of the
        # value's runs inside the guard (its docstring), so a type is read once a call.
        while todo and n < _max:
            v = todo.pop()
            n += 1
            t = _type(v)
            if _id(t) in _scalars or _id(v) in seen:
                continue
            seen.add(_id(v))
            known = checked.get(_id(t)) is t
            problem = (None if known else _own(t)) or _matcher(v, t)
            if problem is None and not _static(t):
                problem, held = _state(v, t, known=known)
                todo.extend(held)
            if problem is None:
                checked[_id(t)] = t
            else:
                raise _error(f"posttrain's repo grader: a value the test compares answers through a "
                             f"method the diff added ({problem})")
            if _subclass(_approx_base, t):
                todo.append(_getattribute(v, "__dict__").get("expected"))
            elif _subclass(_dict, t):  # the base type's methods: a subclass's overrides never run
                todo.extend(_dict.keys(v))
                todo.extend(_dict.values(v))
            elif t is _slice:  # (not a base type)
                todo.extend((v.start, v.stop, v.step))
            elif _subclass(_namespace, t):
                inst = _member_get(_ns_dict, v, t)
                todo.extend(_dict.values(inst) if _type(inst) is _dict else ())
            else:
                for base in _seqs:
                    if _subclass(base, t):
                        todo.extend(_list(base.__iter__(v)))
                        break
        return value

    return guard


def _guard_comparisons(mod: object) -> None:
    """Wrap every operand of a comparison (but ``is``), of arithmetic and of a unary operator in a test
    module in the guard."""
    import ast

    class Wrap(ast.NodeTransformer):
        def visit_BinOp(self, node):  # noqa: ANN001, ANN202, N802 - ast's visitor protocol
            self.generic_visit(node)
            node.left, node.right = wrap(node.left), wrap(node.right)
            return node

        def visit_UnaryOp(self, node):  # noqa: ANN001, ANN202, N802
            self.generic_visit(node)
            if not isinstance(node.op, ast.Not):
                node.operand = wrap(node.operand)
            return node

        def visit_Compare(self, node):  # noqa: ANN001, ANN202, N802
            self.generic_visit(node)
            if all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
                return node

            node.left = wrap(node.left)
            node.comparators = [wrap(c) for c in node.comparators]
            return node

    def wrap(e):  # noqa: ANN001, ANN202
        if isinstance(e, ast.Constant):
            return e
        call = ast.Call(ast.Constant(GUARD_SLOT), [e], [])
        line, col = getattr(e, "lineno", 1), getattr(e, "col_offset", 0)
        end_line = max(getattr(e, "end_lineno", None) or line, line)
        end_col = getattr(e, "end_col_offset", None)
        end_col = col if end_col is None or (end_line == line and end_col < col) else end_col
        for n in (call, call.func):
            n.lineno, n.col_offset, n.end_lineno, n.end_col_offset = line, col, end_line, end_col
        return call

    Wrap().visit(mod)  # (no fix_missing_locations: it would give pytest's nodes their parents' end lines)


ASSERT_SLOT = "\x00posttrain:unittest:"
"""Prefix of the slot a test module's ``self.assertX(...)`` calls through (``_pin_unittest_asserts``)."""


def _unittest_asserts() -> dict:
    """``{slot: method}`` of unittest's assertion methods (``assert*``, ``fail``), as the harness
    installed them (its comparison ones guarded)."""
    import unittest

    names = [n for n in dir(unittest.TestCase) if n.startswith("assert") or n == "fail"]
    return {ASSERT_SLOT + n: getattr(unittest.TestCase, n) for n in names if callable(getattr(unittest.TestCase, n))}


def _pin_unittest_asserts(mod: object, names: frozenset) -> None:
    """``self.assertEqual(a, b)`` in a test module becomes ``<unittest's assertEqual>(self, a, b)``, the
    method a constant of the code: the code under test set ``assertEqual = lambda *a: None`` on a
    withheld TestCase class (unaudited, and no snapshot holds a test module's classes), and its tests
    passed. A class of the module that defines the method itself keeps its own."""
    import ast

    class Pin(ast.NodeTransformer):
        own: list[frozenset] = [frozenset()]

        def visit_ClassDef(self, node):  # noqa: ANN001, ANN202, N802 - ast's visitor protocol
            defined = frozenset(n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
            self.own.append(defined)
            self.generic_visit(node)
            self.own.pop()
            return node

        def visit_Call(self, node):  # noqa: ANN001, ANN202, N802
            self.generic_visit(node)
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" and \
                    f.attr in names and f.attr not in self.own[-1]:
                node.func, node.args = ast.copy_location(ast.Constant(ASSERT_SLOT + f.attr), f), [f.value, *node.args]
            return node

    Pin().visit(mod)


UNITTEST_COMPARISONS = ("assertEqual", "assertNotEqual", "assertIn", "assertNotIn", "assertCountEqual",
                        "assertListEqual", "assertTupleEqual", "assertDictEqual", "assertSetEqual",
                        "assertSequenceEqual", "assertMultiLineEqual", "assertAlmostEqual", "assertNotAlmostEqual")


def _sealed(source: str, values: dict) -> object:
    """The one function ``source`` defines, each name of ``values`` in it read from a constant of its
    code (``_bind``), never from a namespace: a module's globals and a closure's cells are reachable
    through ``__globals__`` and ``__closure__`` (no audit event) and writable. A cell of unittest's
    guarded ``assertEqual`` set to a function that returns None passed every TestCase test (4 of 20
    cachetools tasks with no fix); ``SPAWN_EVENTS`` emptied in the harness's globals let the code under
    test ``posix_spawn`` a ``cat`` of the withheld test."""
    import ast
    import types
    import warnings

    tree = ast.parse(source)

    class Seal(ast.NodeTransformer):
        def visit_Name(self, node):  # noqa: ANN001, ANN202, N802 - ast's visitor protocol
            if node.id in values and isinstance(node.ctx, ast.Load):
                return ast.copy_location(ast.Constant(SEAL + node.id), node)
            return node

    tree = ast.fix_missing_locations(Seal().visit(tree))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ("'str' object is not callable": the constants are bound below)
        module = compile(tree, "<posttrain-repo-harness>", "exec", dont_inherit=True)
    code = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    fn = types.FunctionType(_bind(code, {SEAL + k: v for k, v in values.items()}), {"__builtins__": {}})
    fn.__defaults__ = next(  # (the defaults of the source's own signature: constants only)
        (tuple(ast.literal_eval(d) for d in n.args.defaults) for n in tree.body if isinstance(n, ast.FunctionDef)),
        None) or None
    return fn


UNITTEST_WRAPPER = """
def method(self, first, second, *args, **kwargs):
    guard(first)
    guard(second)
    return original(self, first, second, *args, **kwargs)
"""


def _guard_unittest(guard: object) -> None:
    """unittest's comparison assertions compare in unittest's own code: guard their operands too (each
    wrapper sealed: ``_sealed``)."""
    import unittest

    for name in UNITTEST_COMPARISONS:
        original = getattr(unittest.TestCase, name)
        method = _sealed(UNITTEST_WRAPPER, {"guard": guard, "original": original})
        method.__name__, method.__qualname__, method.__doc__ = original.__name__, original.__qualname__, original.__doc__
        setattr(unittest.TestCase, name, method)


def _mark_tests(mod: object) -> None:
    """Make every test function of a withheld module (``test*`` at its top level or in a class) raise
    ``ENTERED`` through ``AUDIT_SLOT`` before its first statement (after its docstring)."""
    import ast

    def mark(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        first = fn.body[0]
        docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
            isinstance(first.value.value, str)
        at = fn.body[1] if docstring and len(fn.body) > 1 else first
        call = ast.Expr(ast.Call(ast.Constant(AUDIT_SLOT), [ast.Constant(ENTERED)], []))
        for node in (call, call.value, call.value.func, *call.value.args):
            node.lineno, node.col_offset = at.lineno, at.col_offset
            node.end_lineno, node.end_col_offset = at.lineno, at.col_offset
        fn.body.insert(1 if docstring else 0, call)

    for node in mod.body:  # type: ignore[attr-defined]
        for fn in [node] if not isinstance(node, ast.ClassDef) else node.body:
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and fn.name.startswith("test"):
                mark(fn)


def _scope_reads(mod: object, source: bytes, path: str) -> object:
    """``reads(kind, name, node) -> names``: the globals of its module (bound at its top level by an import, a
    ``def``, a class or an assignment, and declared ``global`` by none of its functions) that the scope a
    ``def``, lambda or comprehension opens reads, as ``symtable`` says; none for a scope it cannot match by
    kind, name and line (two lambdas on one line)."""
    import ast
    import symtable

    try:
        top = symtable.symtable(source.decode("utf-8") if isinstance(source, bytes) else source, path, "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return lambda kind, name, node: frozenset()
    declared = {n for node in ast.walk(mod) if isinstance(node, ast.Global) for n in node.names}
    bound = {n for n in top.get_identifiers() if top.lookup(n).is_assigned() or top.lookup(n).is_imported()}
    pinned = frozenset(n for n in bound - declared if not n.startswith("@"))
    tables: dict[tuple, list] = {}
    todo = [top]
    while todo:
        for child in todo.pop().get_children():
            tables.setdefault((str(child.get_type()).lower().rsplit(".", 1)[-1], child.get_name(),
                               child.get_lineno()), []).append(child)
            todo.append(child)

    def reads(kind: str, name: str, node: object) -> frozenset:
        found = tables.get((kind, name, node.lineno), [])
        if len(found) != 1:
            return frozenset()
        table = found[0]
        return frozenset(n for n in table.get_identifiers() if n in pinned and table.lookup(n).is_global())

    return reads


def _pin_globals(mod: object, source: bytes, path: str) -> None:
    """Every read, inside a function of a verifier module, of a global its module binds (``_scope_reads``)
    becomes ``<pin>(name, "name")``, ``pin`` a constant of the code (``PIN_SLOT``): the kernel compares the
    value read with its snapshot of the module (``GLOBAL_READ``). The snapshot was compared at each test's
    start and return only, so ``total`` could set ``_close`` to a function that agrees and puts the original
    back when called, and a test that read ``_close`` after calling ``total`` passed. A class body and the
    module's own statements (run before the snapshot) read as they are."""
    import ast

    reads = _scope_reads(mod, source, path)
    comprehensions = {ast.ListComp: "listcomp", ast.SetComp: "setcomp", ast.DictComp: "dictcomp",
                      ast.GeneratorExp: "genexpr"}

    class Pin(ast.NodeTransformer):
        scope: frozenset = frozenset()

        def visit_Name(self, node):  # noqa: ANN001, ANN202, N802 - ast's visitor protocol
            if isinstance(node.ctx, ast.Load) and node.id in self.scope:
                call = ast.Call(ast.Constant(PIN_SLOT), [node, ast.Constant(node.id), ast.Constant(path)], [])
                for n in (call, call.func, *call.args[1:]):
                    ast.copy_location(n, node)
                return call
            return node

        def visit_FunctionDef(self, node):  # noqa: ANN001, ANN202, N802
            node.decorator_list = [self.visit(n) for n in node.decorator_list]  # (the enclosing scope's)
            self.defaults(node.args)
            names = reads("function", node.name, node)
            outer, self.scope = self.scope, names
            node.body = [self.visit(n) for n in node.body]
            self.scope = outer
            return node

        visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815

        def defaults(self, args):  # noqa: ANN001, ANN202 - (annotations are left as written)
            args.defaults = [self.visit(n) for n in args.defaults]
            args.kw_defaults = [n if n is None else self.visit(n) for n in args.kw_defaults]

        def visit_Lambda(self, node):  # noqa: ANN001, ANN202, N802
            self.defaults(node.args)
            outer, self.scope = self.scope, reads("function", "lambda", node)
            node.body = self.visit(node.body)
            self.scope = outer
            return node

        def visit_ClassDef(self, node):  # noqa: ANN001, ANN202, N802
            node.decorator_list = [self.visit(n) for n in node.decorator_list]
            node.bases = [self.visit(n) for n in node.bases]
            node.keywords = [self.visit(n) for n in node.keywords]
            outer, self.scope = self.scope, frozenset()  # (a class body's own statements read as they are)
            node.body = [self.visit(n) for n in node.body]
            self.scope = outer
            return node

        def comprehension(self, node):  # noqa: ANN001, ANN202
            first = node.generators[0]
            first.iter = self.visit(first.iter)  # (evaluated in the enclosing scope)
            outer, self.scope = self.scope, reads("function", comprehensions[type(node)], node)
            first.target = self.visit(first.target)
            first.ifs = [self.visit(n) for n in first.ifs]
            for gen in node.generators[1:]:
                self.visit(gen)
            for field in ("elt", "key", "value"):
                if getattr(node, field, None) is not None:
                    setattr(node, field, self.visit(getattr(node, field)))
            self.scope = outer
            return node

        visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = comprehension  # noqa: N815

    pin = Pin()
    mod.body = [pin.visit(n) for n in mod.body]  # type: ignore[attr-defined]


def _mark_ready(mod: object) -> None:
    """End a rewritten test module with ``AUDIT_SLOT(MODULE_READY)``: its last statement tells the kernel
    that its globals and classes are what its own code bound (``_module_defs``)."""
    import ast

    body = mod.body  # type: ignore[attr-defined]
    line = max((getattr(n, "end_lineno", None) or getattr(n, "lineno", 1) for n in body), default=1)
    call = ast.Expr(ast.Call(ast.Constant(AUDIT_SLOT), [ast.Constant(MODULE_READY)], []))
    for node in (call, call.value, call.value.func, *call.value.args):
        node.lineno, node.col_offset, node.end_lineno, node.end_col_offset = line, 0, line, 0
    body.append(call)


def _plain_defs(body: list) -> frozenset:
    """The names whose last binding in ``body`` (a module's or a class's statements) is an undecorated
    ``def``: a name rebound later (``test_x = mark(test_x)``, ``del helper``, an ``if`` that redefines it)
    is the module's to bind."""
    import ast

    last: dict[str, bool] = {}
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            last[stmt.name] = not stmt.decorator_list
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                last[node.id] = False
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                last[node.name] = False
            elif isinstance(node, ast.alias):
                last[(node.asname or node.name).split(".")[0]] = False
    return frozenset(name for name, plain in last.items() if plain)


def _parsed(paths):
    """``(path, tree)`` of each of ``paths`` that reads and parses as Python (the others are left out)."""
    import ast

    for path in paths:
        try:
            with open(path, "rb") as fh:
                tree = ast.parse(fh.read(), filename=path)
        except (OSError, SyntaxError, ValueError):
            continue
        yield path, tree


def _module_defs(paths: list[str]) -> dict[str, tuple]:
    """``{path: (functions, classes, free, cells, attrs)}`` of each verifier Python file, from its source before the
    code under test runs: the names of its undecorated top-level functions, ``{class: (methods, undecorated
    methods)}`` of its top-level classes, the names any of its functions declares ``global`` or
    ``setup_module`` sets (a test's own state, which its code may rebind), those declared ``nonlocal``
    (closure cells its code may rebind), and the attribute names it assigns (``cls.db = ...`` in
    ``setUpClass``: class attributes its code may rebind). A class's names are the keys its dictionary holds
    them at (``_mangled``); its undecorated methods come as ``(key, name)``."""
    import ast

    out: dict[str, tuple] = {}
    for path, tree in _parsed(paths):
        defs = ast.FunctionDef | ast.AsyncFunctionDef
        functions = _plain_defs(tree.body)
        classes = {n.name: (frozenset(_mangled(n.name, m.name) for m in n.body if isinstance(m, defs)),
                            frozenset((_mangled(n.name, m), m) for m in _plain_defs(n.body)))
                   for n in tree.body if isinstance(n, ast.ClassDef)}
        free = {name for n in ast.walk(tree) if isinstance(n, ast.Global) for name in n.names}
        for fn in tree.body:  # setup_module(module): module.client = ... (pytest's and unittest's hooks)
            if isinstance(fn, defs) and fn.name in MODULE_HOOKS and fn.args.args:
                param = fn.args.args[0].arg
                free |= {t.attr for n in ast.walk(fn) if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign)
                         for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                         if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == param}
        cells = frozenset(name for n in ast.walk(tree) if isinstance(n, ast.Nonlocal) for name in n.names)
        attrs = frozenset(t.attr for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign)
                          for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Attribute))
        out[path] = (functions, classes, frozenset(free), cells, attrs)
    return out


def _mangled(klass: str, name: str) -> str:
    """The key a class's dictionary holds ``name`` at: ``def __get`` in ``class Cached`` is ``_Cached__get``
    (the gold of 28 of 289 pack tasks, whose ``tests/test_cachedmethod.py`` has one, was ``tamper``)."""
    private = name.startswith("__") and not name.endswith("__") and klass.lstrip("_")
    return f"_{klass.lstrip('_')}{name}" if private else name


def _module_names(payload: dict, loaded: frozenset) -> dict[str, frozenset]:
    """``{import name: {verifier file}}``: the names each verifier Python file imports as, from every root of
    ``sys.path`` the run has (``python_path``, the work tree, and the directory pytest's ``prepend`` import
    mode inserts above each test module's package), less the names of modules loaded before the run
    (``import typing`` in a test finds the standard library's, whatever ``tests/typing.py`` holds)."""
    work = payload["work"]
    files = {f"{work}/{p}" for p in (*payload["verifier_files"], *payload["pristine_files"], *payload["changed"])}
    verifier = [f"{work}/{p}" for p in payload["verifier_files"] if p.endswith(".py")]
    roots = {f"{work}/{p}".rstrip("/.") or work for p in payload["python_path"]} | {work}
    for path in verifier:
        if _rewritten_by_pytest(path):
            base = path.rsplit("/", 1)[0]
            while f"{base}/__init__.py" in files and base != work:
                base = base.rsplit("/", 1)[0]
            roots.add(base)
    out: dict[str, set] = {}
    for path in verifier:
        for root in roots:
            if path.startswith(root + "/"):
                parts = path[len(root) + 1:-3].split("/")
                if parts[-1] == "__init__":
                    parts.pop()
                name = ".".join(parts)
                if parts and name not in loaded:
                    out.setdefault(name, set()).add(path)
    return {k: frozenset(v) for k, v in out.items()}


def _module_imports(paths: list[str], names: dict[str, frozenset]) -> dict[str, tuple]:
    """``{path: ((global, files, attribute, chain), ...)}``: each global a verifier file binds (only) by a
    top-level import of another verifier module: the module itself (``attribute`` None) or a name taken
    from it, and for ``import a.b`` the chain ``((a's files, "b", a.b's files), ...)`` its uses walk. The
    kernel checks them when the module's import ends (``on_module_ready``): the code under test put a
    module of its own in ``sys.modules["tests.helpers"]`` before the withheld test imported it, and its
    ``check`` agreed with everything (every withheld test passed)."""
    import ast

    def files(module: str | None, level: int, path: str) -> frozenset:
        if not level:
            return names.get(module or "", frozenset())
        base = path.rsplit("/", level)[0] + ("/" + module.replace(".", "/") if module else "")
        verifier = set(paths)
        return frozenset(p for p in (f"{base}.py", f"{base}/__init__.py") if p in verifier)

    out: dict[str, tuple] = {}
    for path, tree in _parsed(paths):
        bound: dict[str, tuple] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    parts = alias.name.split(".")
                    if alias.asname:
                        bound[alias.asname] = (files(alias.name, 0, path), None, ())
                        continue
                    chain = tuple((files(".".join(parts[:i]), 0, path), parts[i], files(".".join(parts[:i + 1]), 0, path))
                                  for i in range(1, len(parts)))
                    bound[parts[0]] = (files(parts[0], 0, path), None, chain)
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    inner = f"{stmt.module}.{alias.name}" if stmt.module else alias.name
                    module = files(inner, stmt.level, path)
                    bound[alias.asname or alias.name] = (module, None, ()) if module else \
                        (files(stmt.module, stmt.level, path), alias.name, ())
        other = _bound_otherwise(tree)  # a name bound another way too is the module's to bind
        out[path] = tuple((name, module, attr, tuple(c for c in chain if c[0] and c[2]))
                          for name, (module, attr, chain) in bound.items() if module and name != "*" and
                          name not in other)
    return out


def _bound_otherwise(tree: object) -> frozenset:
    """The names a module binds other than by a top-level import statement."""
    import ast

    out = set()
    for stmt in tree.body:  # type: ignore[attr-defined]
        for node in ast.walk(stmt) if not isinstance(stmt, ast.Import | ast.ImportFrom) else ():
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                out.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                out.add(node.name)
            elif isinstance(node, ast.alias):
                out.add((node.asname or node.name).split(".")[0])
    return frozenset(out)
    return out


def _bind(code: object, slots: dict) -> object:
    """``code`` with every constant that is a key of ``slots`` replaced by its value, in nested code
    objects too (before any candidate code runs, or in the import of a test module)."""
    import types

    consts = tuple(_bind(c, slots) if isinstance(c, types.CodeType) else
                   slots.get(c, c) if type(c) is str else c for c in code.co_consts)
    return code.replace(co_consts=consts) if consts != code.co_consts else code


APPROX_WRAPPER = """
def approx(expected, rel=None, abs=None, nan_ok=False):
    getframe(1)
    value = original(expected, rel=rel, abs=abs, nan_ok=nan_ok)
    audit(event, value)
    return value
"""


def _approx_of_tests() -> object:
    """``pytest.approx`` that tells the kernel of each approx it made (``APPROX``), sealed (``_sealed``);
    its code, which the kernel takes the event from. It takes its caller's frame (``sys._getframe``,
    audited), so a call from the code under test ends the run, and an approx built another way
    (``ApproxScalar(...)``) is not the kernel's. An approx the code under test returned agreed with
    every ``==`` of a tolerance under 1e6; one put in a dict the guard read (reached through this
    function's closure) passed 5 of 6 tests."""
    import _pytest.python_api as python_api
    import pytest

    original = python_api.approx
    approx = _sealed(APPROX_WRAPPER, {"getframe": sys._getframe, "original": original, "audit": sys.audit,
                                      "event": APPROX})
    approx.__doc__ = original.__doc__
    python_api.approx = pytest.approx = approx
    return approx.__code__


def _install_guard(pristine: frozenset, test_files: frozenset, pristine_classes: frozenset,
                   hidden: frozenset) -> tuple[dict, object]:
    """pytest's assertion rewriter wrapping test modules' comparisons in the guard, pinning their
    unittest assertions and marking the withheld modules' tests (the pristine codes are compiled by
    the same rewriter, so they include all three); the slots' values (``_bind``), which the
    rewriter's code objects get, and the code of the harness's ``pytest.approx``."""
    import _pytest.assertion.rewrite as rewrite

    approx_code = _approx_of_tests()
    guard = _make_guard(pristine, test_files, pristine_classes, sys.audit)
    _guard_unittest(guard)
    pin = _sealed(PIN_SOURCE, {"audit": sys.audit, "event": GLOBAL_READ})
    slots = {GUARD_SLOT: guard, AUDIT_SLOT: sys.audit, PIN_SLOT: pin, **_unittest_asserts()}
    names = frozenset(k[len(ASSERT_SLOT):] for k in slots if k.startswith(ASSERT_SLOT))
    original, compile_test = rewrite.rewrite_asserts, rewrite._rewrite_test

    def rewrite_asserts(mod, source, module_path=None, config=None):  # noqa: ANN001, ANN202 - pytest's
        original(mod, source, module_path, config)
        _pin_globals(mod, source, str(module_path))
        _guard_comparisons(mod)
        _pin_unittest_asserts(mod, names)
        if str(module_path) in hidden and _rewritten_by_pytest(str(module_path)):
            _mark_tests(mod)
        _mark_ready(mod)

    def rewrite_test(fn, config):  # noqa: ANN001, ANN202 - pytest's
        stat, co = compile_test(fn, config)
        return stat, _bind(co, slots)

    rewrite.rewrite_asserts, rewrite._rewrite_test = rewrite_asserts, rewrite_test
    _rewrite_helpers(frozenset(p for p in test_files if p.endswith(".py") and not _rewritten_by_pytest(p)))
    return slots, approx_code


PIN_SOURCE = """
def pin(value, name, module):
    audit(event, name, value, module)
    return value
"""
REWRITE_CHOICE = """
def _should_rewrite(self, name, fn, state):
    return fn in helpers or original(self, name, fn, state)
"""
REWRITE_BAILOUT = """
def _early_rewrite_bailout(self, name, state):
    return name.rpartition(".")[2] not in stems and original(self, name, state)
"""


def _rewrite_helpers(helpers: frozenset) -> None:
    """pytest's import hook rewrites every verifier module, not only those it collects: an ``assert value
    == expected`` in ``tests/helpers.py``, compiled as it is, compared an object that always agrees with
    no guard (every withheld test that judged through it passed). The hook's choice, by file name (a
    module's import name depends on ``sys.path``), is sealed (``_sealed``); the kernel refuses a verifier
    module the import system runs from other code than this rewriter's (``on_exec``), so a finder or a
    cell of the code under test that skips it changes nothing."""
    from _pytest.assertion.rewrite import AssertionRewritingHook as Hook

    stems = frozenset(p.rsplit("/", 2)[-2] if p.endswith("/__init__.py") else p.rsplit("/", 1)[-1][:-3]
                      for p in helpers)
    for source, name, values in ((REWRITE_CHOICE, "_should_rewrite", {"helpers": helpers}),
                                 (REWRITE_BAILOUT, "_early_rewrite_bailout", {"stems": stems})):
        original = vars(Hook)[name]
        method = _sealed(source, {**values, "original": original})
        method.__qualname__, method.__doc__ = original.__qualname__, original.__doc__
        setattr(Hook, name, method)


UNITTEST_RETURNED = "posttrain.unittest_returned"
UNITTEST_CALL = """
def _callTestMethod(self, method):
    if method() is not None:
        warn(f"It is deprecated to return a value that is not None from a test case ({method})",
             DeprecationWarning, stacklevel=3)
    audit(event)
"""
"""unittest's ``TestCase._callTestMethod``, sealed (``_sealed``), telling the kernel that the test method
returned: ``addSuccess`` alone followed a test whose failed assertion raised ``_ShouldStop``, which
unittest's ``testPartExecutor`` swallows (``failureException = unittest.case._ShouldStop`` on the test
class, from the code under test: 7 of 20 cachetools tasks passed with no fix)."""


def _glue(audit: object) -> tuple[object, dict]:
    """The pytest plugin and unittest result methods that call the tests and tell the kernel."""
    import inspect

    import pytest
    from _pytest.unittest import TestCaseFunction

    class Glue:
        @pytest.hookimpl(tryfirst=True)
        def pytest_pyfunc_call(self, pyfuncitem):  # noqa: ANN001, ANN201 - pytest's hook
            testfunction = pyfuncitem.obj
            if inspect.iscoroutinefunction(testfunction) or inspect.isasyncgenfunction(testfunction):
                pytest.fail("async test functions are not supported by the repo grader", pytrace=False)
            funcargs = pyfuncitem.funcargs
            testargs = {arg: funcargs[arg] for arg in pyfuncitem._fixtureinfo.argnames}
            nodeid = pyfuncitem.nodeid
            audit("posttrain.begin", nodeid)
            result = testfunction(**testargs)
            if result is not None:
                pytest.fail(f"the test returned {type(result).__name__}, not None", pytrace=False)
            audit("posttrain.returned", nodeid)
            return True

        def pytest_runtest_logreport(self, report):  # noqa: ANN001, ANN201 - pytest's hook
            audit("posttrain.report", str(report.nodeid), str(report.when), str(report.outcome))

    def startTest(self, testcase):  # noqa: ANN001, ANN202, N802 - unittest's result protocol
        audit("posttrain.begin_unittest", self.nodeid)

    def addSuccess(self, testcase):  # noqa: ANN001, ANN202, N802 - unittest's result protocol
        audit("posttrain.returned_unittest", self.nodeid)

    import unittest
    import warnings

    call = _sealed(UNITTEST_CALL, {"audit": audit, "warn": warnings.warn, "event": UNITTEST_RETURNED,
                                   "DeprecationWarning": DeprecationWarning})
    call.__name__, call.__qualname__ = "_callTestMethod", "TestCase._callTestMethod"
    unittest.TestCase._callTestMethod = call
    TestCaseFunction.startTest = startTest
    TestCaseFunction.addSuccess = addSuccess
    codes = {"posttrain.begin": Glue.pytest_pyfunc_call.__code__, "posttrain.returned": Glue.pytest_pyfunc_call.__code__,
             "posttrain.begin_unittest": startTest.__code__, "posttrain.returned_unittest": addSuccess.__code__,
             "posttrain.report": Glue.pytest_runtest_logreport.__code__, UNITTEST_RETURNED: call.__code__}
    return Glue(), codes


def _blank_withheld_lines(paths: list[str]) -> None:
    """A blank ``linecache`` entry (as many lines, never checked against the file) for each withheld test
    file: formatting a warning located in it (``warnings.warn_explicit(..., filename)``) or a withheld
    test's failure read the file into ``linecache.cache``, a plain dict the code under test read the
    expected values from. Withheld tests' failures are not shown to the policy anyway."""
    import linecache

    for path in paths:
        if not path.endswith(".py"):
            continue
        try:
            with open(path, "rb") as fh:
                n = fh.read().count(b"\n") + 1
        except OSError:
            continue
        linecache.cache[path] = (0, None, ["pass  # withheld\n"] * n, path)


def _frame_allowlist() -> tuple[dict[int, object], int, int]:
    """Standard-library functions that may take a frame while changed code is on the stack: each reads
    a module name or a caller's file and line, and hands no frame back (logging's ``currentframe``
    only to ``findCaller``)."""
    import collections
    import enum
    import logging
    import typing

    fns = [collections.namedtuple, logging.Logger.findCaller, logging.currentframe]
    if hasattr(typing, "_caller"):
        fns.append(typing._caller)
    for name in ("_create_", "__call__"):
        f = getattr(enum.EnumType, name, None) if hasattr(enum, "EnumType") else None
        if f is not None:
            fns.append(getattr(f, "__func__", f))
    out = {id(f.__code__): f.__code__ for f in fns if hasattr(f, "__code__")}
    return out, id(logging.currentframe.__code__), id(logging.Logger.findCaller.__code__)


def _class_names(payload: dict) -> frozenset:
    """``{(module, qualname)}`` of the pristine repository's classes, under every module name their file
    imports as (a root of ``python_path``, or the work tree): the guard matches a class by its own
    ``__module__`` string, never through ``sys.modules`` (whose lookups could run a key's ``__eq__``)."""
    work = payload["work"]
    roots = [f"{work}/{p}".rstrip("/.") or work for p in payload["python_path"]] + [work]
    out = set()
    for path, qualname in payload["pristine_classes"]:
        full = f"{work}/{path}"
        for root in roots:
            if full.startswith(root + "/") and full.endswith(".py"):
                parts = full[len(root) + 1:-3].split("/")
                if parts[-1] == "__init__":
                    parts.pop()
                if parts:
                    out.add((".".join(parts), qualname))
    return frozenset(out)


def main(payload: dict) -> None:
    """Run the listed tests under the kernel and exit with pytest's status (never returns)."""
    import builtins
    import os
    import posix

    int_ = int  # (read after the code under test ran: the harness's globals are its to write)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONPATH"):
        os.environ.pop(name, None)
    sys.path[:] = [p for p in sys.path if p and p.startswith("/usr/")] + ["/usr/lib/python3/dist-packages"]
    import doctest
    import importlib
    import linecache
    import unittest
    import weakref

    import _pytest.assertion.rewrite
    import _pytest.config
    import pytest  # noqa: F401 - imported before any candidate code, so its modules are the snapshot's

    rewrite_compile = id(_pytest.assertion.rewrite._rewrite_test.__code__)  # (before _install_guard wraps it)

    for name in (*PRELOAD, *(f"_pytest.{p}" for p in _pytest.config.default_plugins)):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module this interpreter lacks is simply not preloaded
            pass
    dumpable_off = _prctl_not_dumpable()
    _install_signal_guard()
    audit = sys.audit
    fork_exec, spawn_code = _install_spawn_guard(audit)
    create_builtin, builtin_code = _install_builtin_guard(audit)
    plugin, glue_codes = _glue(audit)
    glue_codes["posttrain.finish"] = main.__code__
    work = payload["work"]
    verifier_files = [f"{work}/{p}" for p in payload["verifier_files"]]
    slots, approx_code = _install_guard(frozenset((f"{work}/{p}", q) for p, q in payload["pristine_functions"]),
                           frozenset(verifier_files), _class_names(payload),
                           frozenset(f"{work}/{p}" for p in payload["hidden"]))
    expected = _pristine_codes([f"{work}/{p}" for p in payload["verifier_files"] if p.endswith(".py")], slots)
    _blank_withheld_lines([f"{work}/{p}" for p in payload["hidden"]])
    modules = {k: v for k, v in sys.modules.items() if k != "__main__"}
    modules["posttrain_harness"] = sys.modules.get("posttrain_harness")
    entries, trusted = _snapshot(modules)
    frame = sys._getframe()
    while frame.f_back is not None:
        frame = frame.f_back
    bottom = frame.f_code
    for code in (bottom, main.__code__, _install_guard.__code__, _approx_of_tests.__code__, _bind.__code__,
                 _pin_globals.__code__, _scope_reads.__code__,
                 spawn_code, builtin_code, slots[PIN_SLOT].__code__, *glue_codes.values()):
        _code_objects(code, trusted)  # (_bind and _pin_globals run in each test module's import: its code.replace
        # and symtable's compile are trusted)
    allow, logging_cf, logging_fc = _frame_allowlist()
    cfg = {"nonce": payload.pop("nonce"), "verifier_files": verifier_files, "hidden": [f"{work}/{p}" for p in payload["hidden"]], "work": work + "/",
           "pristine_files": frozenset(f"{work}/{p}" for p in payload["pristine_files"]),
           "logging_currentframe": logging_cf, "logging_findcaller": logging_fc,
           "doctest_run": id(doctest.DocTestRunner.run.__code__),
           "unittest_call": id(unittest.TestCase._callTestMethod.__code__),
           "linecache_update": id(linecache.updatecache.__code__),
           "deferred": frozenset({id(weakref.finalize.__call__.__code__)}),
           "import_codes": frozenset({id(importlib._bootstrap_external.SourceLoader.get_code.__code__),
                                      id(_pytest.assertion.rewrite._rewrite_test.__code__)}), "ready": f"dumpable_off={dumpable_off}",
           "approx_code": approx_code, "rewrite_compile": rewrite_compile,
           "testcase_names": frozenset(k for c in unittest.TestCase.__mro__ for k in vars(c) if type(k) is str and
                                       not (k.startswith("__") and k.endswith("__"))), "read_pyc": id(_pytest.assertion.rewrite._read_pyc.__code__),
           "rewrite_exec": id(_pytest.assertion.rewrite.AssertionRewritingHook.exec_module.__code__),
           "fork_exec": fork_exec, "spawn_code": spawn_code, "create_builtin": create_builtin,
           "builtin_code": builtin_code,
           "builtin_names": frozenset(k for k in vars(builtins) if type(k) is str),
           "module_defs": _module_defs([f"{work}/{p}" for p in payload["verifier_files"] if p.endswith(".py")]),
           "module_imports": _module_imports([f"{work}/{p}" for p in payload["verifier_files"] if p.endswith(".py")],
                                             _module_names(payload, frozenset(sys.modules)))}
    del frame
    sys.addaudithook(_private(_make_kernel)(cfg, trusted, entries, expected, glue_codes, allow, bottom))
    del cfg, trusted, entries, expected, allow, bottom, fork_exec, create_builtin
    ini = f"/tmp/posttrain-pytest-{os.getpid()}.ini"
    with open(ini, "w") as fh:
        fh.write("[pytest]\naddopts =\n")
    os.chdir(work)
    sys.path[:0] = [f"{work}/{p}".rstrip("/.") or work for p in payload["python_path"]]
    if "/work" not in sys.path:
        sys.path.insert(len(payload["python_path"]), work)
    args = ["-q", "-rN", "--color=no", "-p", "no:cacheprovider", "-p", "no:stepwise", "-p", "no:pastebin",
            "-p", "no:junitxml", "-c", ini, f"--rootdir={work}", f"--confcutdir={work}", "--tb=short",
            "-o", "console_output_style=classic", *payload["test_ids"]]
    rc = int_(pytest.main(args, plugins=[plugin]))
    for stream in (sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - output is feedback only; the report decides
            pass
    audit("posttrain.finish", rc)
    posix._exit(rc if 0 <= rc < 256 else 3)
