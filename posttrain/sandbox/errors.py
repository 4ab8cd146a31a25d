"""The one exception tree of ``posttrain.sandbox``.

::

    SandboxError                      base of everything this package raises
    ├── HostCannotIsolate             this host lacks a primitive the sandbox needs (bwrap, user
    │                                 namespaces, cgroups, libseccomp); also a UserError: the CLI
    │                                 prints what is missing and how to fix it, and exits 2.
    │                                 There is never a silent fallback to weaker isolation.
    ├── LimitsError                   a Limits value or a job argument is invalid (also a UserError)
    ├── WorkspaceError                a workspace path is invalid or escapes the workspace (also a UserError)
    │   ├── WorkspaceFileMissing      ``read_file``: nothing at the path (never written, or deleted)
    │   └── WorkspaceFileTooLarge     ``read_file``: the file is longer than the ``max_bytes`` asked
    └── PoolClosed                    the pool was used after ``close()``

What is *not* an exception: a job that fails (nonzero exit, signal, timeout, out of memory) is
``Execution(outcome="error")``, and a sandbox that failed while running a job (a slot that died,
a missing report pipe, a cgroup write that failed) is ``Execution(outcome="infra_error")`` with
``infra_detail`` saying what went wrong. Callers retry infra errors; they never score them.
"""

from __future__ import annotations

from posttrain.errors import UserError

__all__ = ["SandboxError", "HostCannotIsolate", "LimitsError", "WorkspaceError", "WorkspaceFileMissing",
           "WorkspaceFileTooLarge", "PoolClosed"]


class SandboxError(Exception):
    """Base class of every exception raised by ``posttrain.sandbox``."""


class HostCannotIsolate(SandboxError, UserError):
    """The host lacks an isolation primitive; the message names it and how to fix it."""


class LimitsError(SandboxError, UserError):
    """A limit or job argument is out of range; the message names the field and the value."""


class WorkspaceError(SandboxError, UserError):
    """A workspace path is absent, invalid, or points outside the workspace."""


class WorkspaceFileMissing(WorkspaceError):
    """Nothing is at the path ``read_file`` was asked for (never written, or deleted). A class of its
    own because a grader tells a deletion from a link or a fifo by it: the message holds the path,
    which the agent names (a link called ``x does not exist`` read as deleted, and went ungraded)."""


class WorkspaceFileTooLarge(WorkspaceError):
    """The file ``read_file`` was asked for is longer than its ``max_bytes``; read no further."""


class PoolClosed(SandboxError):
    """The pool was used after ``close()``."""
