"""A job that leaves memory charged to its slot for a moment costs the next job nothing (``_cgroup.DRAIN_WAIT_S``).

Once, an honest 16 MB job was an infra error (``slot error: OSError: [Errno 16] Device or resource
busy``) right after a 1,500 MB job that filled its file systems: the next job's lower memory limit
could not be written while the last job's tmpfs pages were still charged to the slot (the kernel
lists an exiting process in no ``cgroup.procs`` before it has let go of them; tmpfs pages cannot be
reclaimed without swap). Here the charge is held on purpose, by an fd of the host's for a file the
job wrote, and let go a moment later: before the fix the lower limit failed at once, 2 of 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from posttrain.sandbox import Limits
from posttrain.sandbox._cgroup import SlotCgroup, detect_layout

_MiB = 1 << 20


def _close_later(fd: int, after_s: float) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(after_s), os.close(fd)))
    t.start()
    return t


def test_a_lower_limit_waits_for_tmpfs_pages_a_process_of_the_slot_left_charged(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128m", "drain-test", str(mnt)], check=True)
    cg = SlotCgroup(detect_layout(), f"posttrain-sbx-{os.getpid()}-draintest")  # reaped if this dies
    try:
        cg.set_limits(256 * _MiB, 16, 1.0)
        # a process of the slot writes 64 MiB to the tmpfs (charged to the slot) and exits
        join = "".join(f"open({f!r}, 'w').write(str(os.getpid()))\n" for f in cg.procs_files)
        write = f"open({str(mnt / 'f')!r}, 'wb').write(bytes(64 << 20))\n"
        subprocess.run([sys.executable, "-c", "import os\n" + join + write], check=True)
        assert not cg.pids_inside()
        fd = os.open(mnt / "f", os.O_RDONLY)
        (mnt / "f").unlink()  # freed with the fd: what a process still exiting lets go of a moment later
        t0 = time.monotonic()
        closer = _close_later(fd, 0.3)
        cg.set_limits(16 * _MiB, 16, 1.0)  # before: OSError EBUSY at once
        closer.join()
        assert 0.25 < time.monotonic() - t0 < 5.0
    finally:
        cg.destroy()
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_small_job_after_one_whose_files_are_still_charged_is_no_infra_error(pool1):
    """The reported case, end to end: a job fills /tmp; its tmpfs stays charged to the slot a moment
    after the job (held here by the host's fd); the next job asks for 16 MB."""
    tmp = pool1._all_z[0].places.path("tmp")
    src = ("import os, time\nopen('/tmp/f', 'wb').write(bytes(100 << 20))\n"
           "end = time.monotonic() + 20\n"
           "while not os.path.exists('/tmp/go') and time.monotonic() < end:\n    time.sleep(0.01)\n")  # fmt: skip
    held: list[int] = []

    def hold() -> None:
        end = time.monotonic() + 20
        while time.monotonic() < end:
            try:
                if os.stat(tmp / "f").st_size == 100 * _MiB:
                    held.append(os.open(tmp / "f", os.O_RDONLY))
                    (tmp / "go").touch()
                    return
            except FileNotFoundError:
                pass
            time.sleep(0.01)

    holder = threading.Thread(target=hold)
    holder.start()
    big = pool1.run_python(src, timeout=30, limits=Limits(memory_mb=256, file_size_mb=128))
    holder.join()
    assert big.ok and len(held) == 1, big
    closer = _close_later(held[0], 0.5)
    small = pool1.run_python("print(1)", limits=Limits(memory_mb=16))
    closer.join()
    assert small.ok and small.stdout == b"1\n", small  # before: infra_error, slot error: OSError: [Errno 16]
