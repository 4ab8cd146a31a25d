"""The service's memory budget reads the container's cgroup limit (v1 and v2), not only physical memory.

The parsers run on fixture trees laid out under a tmp dir as the kernel lays them out (a v2 host, a
v1 host, a container's subtree mount); the real read runs on this machine, whatever it is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from posttrain.sched._memory import cgroup_limits_mb, memory_limit_mb, physical_memory_mb

GIB = 2**30
V1_UNLIMITED = "9223372036854771712"  # what a v1 cgroup with no limit holds (2^63 rounded down to a page)


def _tree(root: Path, cgroup: str, mountinfo: str, files: dict[str, str]) -> Path:
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    (root / "proc/self/mountinfo").write_text(mountinfo)
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


V2_MOUNT = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
V1_MOUNTS = ("35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
             "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
             "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")


def test_v2_reads_memory_max_of_the_process_cgroup_and_its_ancestors(tmp_path) -> None:
    """A nested cgroup (a systemd slice inside a pod): the tightest of the chain wins; "max" is no limit."""
    root = _tree(tmp_path, "0::/kubepods.slice/pod1/ctr\n", V2_MOUNT, {
        "sys/fs/cgroup/kubepods.slice/memory.max": "max\n",
        "sys/fs/cgroup/kubepods.slice/pod1/memory.max": str(6 * GIB) + "\n",
        "sys/fs/cgroup/kubepods.slice/pod1/ctr/memory.max": "max\n",
    })
    assert cgroup_limits_mb(root) == [6 * 1024.0]
    assert memory_limit_mb(root) == min(6 * 1024.0, physical_memory_mb())
    (root / "sys/fs/cgroup/kubepods.slice/pod1/ctr/memory.max").write_text(str(GIB // 2))
    assert memory_limit_mb(root) == 512.0


def test_v1_reads_limit_in_bytes_and_an_unlimited_cgroup_is_physical_memory(tmp_path) -> None:
    cgroup = "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n"
    root = _tree(tmp_path, cgroup, V1_MOUNTS, {
        "sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED,
        "sys/fs/cgroup/memory/docker/memory.limit_in_bytes": V1_UNLIMITED,
        "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": V1_UNLIMITED,
    })
    assert memory_limit_mb(root) == physical_memory_mb()
    (root / "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes").write_text(str(2 * GIB))
    assert memory_limit_mb(root) == 2048.0


def test_a_container_sees_its_own_cgroup_at_the_mount_root(tmp_path) -> None:
    """v1 without a cgroup namespace: /proc/self/cgroup names /docker/abc, but the container's mount
    holds only that subtree (mountinfo's root field): the limit is read at the mount point."""
    mount = "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n"
    root = _tree(tmp_path, "4:memory:/docker/abc\n", mount,
                 {"sys/fs/cgroup/memory/memory.limit_in_bytes": str(3 * GIB)})
    assert cgroup_limits_mb(root) == [3 * 1024.0]
    (root / "proc/self/cgroup").write_text("4:memory:/elsewhere\n")  # outside the mounted subtree
    assert cgroup_limits_mb(root) == [3 * 1024.0]


@pytest.mark.parametrize("broken", ["no files", "garbage", "a directory"])
def test_reading_never_fails_a_run(tmp_path, broken) -> None:
    if broken == "garbage":
        _tree(tmp_path, "not:a\x00cgroup\n::\n4:memory\n", "junk - \n - cgroup2\n",
              {"sys/fs/cgroup/memory.max": "12abc"})
    elif broken == "a directory":
        _tree(tmp_path, "0::/a\n", V2_MOUNT, {"sys/fs/cgroup/a/memory.max/x": "1"})
    assert memory_limit_mb(tmp_path) == physical_memory_mb()


def test_the_real_read_on_this_machine_and_the_service_budget() -> None:
    """On this machine (cgroup v1 on the CI VM, v2 on the GPU hosts): every limit the process's own
    cgroup file holds is among those read, and the service's default budget is 75% of the least."""
    from posttrain.cli import domain_hooks
    from posttrain.sched import LocalBackend, Service

    own = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and controllers == "":
            own.append(Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.max")
        elif "memory" in controllers.split(","):
            own.append(Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.limit_in_bytes")
    read = cgroup_limits_mb(Path("/"))
    for f in own:
        if f.is_file() and f.read_text().strip().isdigit():
            assert int(f.read_text()) / 2**20 in read
    limit = memory_limit_mb()
    assert limit == min([physical_memory_mb(), *read]) and limit > 0
    with Service(LocalBackend(domain_hooks(["math"], None))) as svc:
        assert svc.stats()["memory"]["budget_mb"] == round(0.75 * limit, 1)
