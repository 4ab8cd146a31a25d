"""Suite-wide settings.

torch runs on one thread in tests: the sandbox workers and math-verify workers share the same two
cores, and OpenMP spin-waiting under oversubscription made sampling 20x slower here.
"""

import os

import torch

torch.set_num_threads(1)

# Property tests share two cores with sandbox jobs and other suites: input generation may be slow
# there without anything being wrong, so no test fails on the clock (a test's own @settings may
# still narrow its examples). Loaded here, before the test modules build their settings on it.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("posttrain", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("posttrain")

# transformers' loading and saving bars go to stderr: `posttrain run` hides them (cli/pipeline.py), so in
# a process where a run already happened they are gone and elsewhere not. Hidden for the whole suite,
# so that a test that counts the lines of its stderr reads the same under any order (pytest-xdist).
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.disable_progress_bar()


# A test marked ``cpu_hog`` runs spinners at nice -20 (the starvation tests): for its seconds every other
# process on the host gets ~1% of a CPU. CI saw a SIGKILLed process of the other xdist worker's test still
# running afterwards and a 0.4 s job measured at 0.44 s. Such a test holds this lock alone; every other
# test holds it shared, so none runs beside one (a wait of seconds, a few times a suite). The lock is
# held around an item's whole protocol, so the module- and session-scoped fixtures it sets up (a
# sandbox pool starting) or tears down are inside it too: an autouse fixture, function-scoped, came
# after them.
import fcntl  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the same in every worker of one run
    if run is None:  # one process: nothing runs beside the test
        yield
        return
    fd = os.open(Path(tempfile.gettempdir()) / f"posttrain-cpu-hog-{run}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        hog = item.get_closest_marker("cpu_hog") is not None
        fcntl.flock(fd, fcntl.LOCK_EX if hog else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing drops the lock


# Two fixtures of the bad-input tests, shared here (a fixture imported from another test module is a
# ruff F811 at every test that takes it).
import subprocess  # noqa: E402


@pytest.fixture()
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 128 KiB tmpfs, a disk that fills (root only: skipped elsewhere)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


@pytest.fixture
def closed_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache, a hub at a loopback port no one listens on, and no proxy."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(key, raising=False)
    return cache


# A made-up tree under /usr/local/share, where `pip install` as root leaves a project: the hiding tests
# plant one, and the sandbox's index of host copies must forget it once it is built and once it is gone.
import contextlib  # noqa: E402
import secrets  # noqa: E402
import shutil  # noqa: E402
from collections.abc import Callable  # noqa: E402


@pytest.fixture(scope="session")
def usr_local() -> Callable[[str, Callable[[Path], object]], contextlib.AbstractContextManager[Path]]:
    """``with usr_local("tag", build) as top:`` -- ``build(top)`` fills a fresh
    ``/usr/local/share/posttrain-tag-<hex>``, which is then opened to every job (0755) with the index of
    host copies forgotten; the tree is removed, and the index forgotten again, when the block ends.
    Skips the test where /usr/local cannot be written (not root)."""
    from posttrain.sandbox._hide import forget_index

    @contextlib.contextmanager
    def plant(tag: str, build: Callable[[Path], object]) -> Iterator[Path]:
        top = Path(f"/usr/local/share/posttrain-{tag}-{secrets.token_hex(4)}")
        try:
            top.mkdir(parents=True)
        except OSError as e:
            pytest.skip(f"cannot write under /usr/local ({e})")
        try:
            build(top)
            os.chmod(top, 0o755)
            forget_index()
            yield top
        finally:
            shutil.rmtree(top, ignore_errors=True)
            forget_index()

    return plant
