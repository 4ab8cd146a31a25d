"""``posttrain bench ...`` refuses bad input as the main CLI does: one line naming the flag and what
was expected, exit 2, before any work (no run started, nothing written), never a traceback."""

from __future__ import annotations

import subprocess

import pytest
import torch

from posttrain.cli import main
from posttrain.cli.bench import NAMES


class WorkStarted(Exception):
    pass


@pytest.fixture
def no_work(monkeypatch):
    """Any run a bench would start (a subprocess, torch set up for training) fails the test here."""
    def started(*args, **kwargs):
        raise WorkStarted(f"work started: {args[:1]}")

    monkeypatch.setattr(subprocess, "run", started)
    monkeypatch.setattr(subprocess, "Popen", started)
    monkeypatch.setattr(torch, "set_num_threads", started)


def refused(argv: list[str], capsys) -> str:
    """Run ``posttrain bench ...``; assert exit 2 with one line on stderr; return that line."""
    with pytest.raises(SystemExit) as e:
        main(["bench", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err.strip()


@pytest.mark.parametrize("name", NAMES)
def test_an_unknown_flag_is_one_line(name, capsys, no_work):
    required = ["--domain", "files"] if name == "domain_agents" else []
    line = refused([name, *required, "--no-such-flag"], capsys)
    assert line.startswith(f"posttrain bench {name}: error: unrecognized arguments: --no-such-flag")


def test_a_bad_count_is_one_line(capsys, no_work):
    line = refused(["quickstart", "--torch-threads", "x"], capsys)
    assert "--torch-threads: invalid int value: 'x'" in line


@pytest.mark.parametrize("seeds,needle", [
    ("3-1", "--seeds '3-1': range 3-1 is empty"),
    ("0,0", "--seeds '0,0': 0 is given twice"),
    ("0-2,1", "--seeds '0-2,1': 1 is given twice"),
    ("", "--seeds '': expected integers like 0,1,2 or 0-4"),
])
@pytest.mark.parametrize("name,out_flag", [("quickstart", "--out"), ("learn", "--runs"), ("repair", "--out"),
                                           ("curriculum", "--out")])
def test_empty_reversed_or_repeated_seeds_are_refused(name, out_flag, seeds, needle, tmp_path, capsys, no_work):
    assert needle in refused([name, "--seeds", seeds, out_flag, str(tmp_path / "runs")], capsys)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("flag,value,needle", [
    ("--seeds", "2-0", "--seeds '2-0': range 2-0 is empty"),
    ("--seeds", "1,1", "--seeds '1,1': 1 is given twice"),
    ("--levels", "8,2,8", "--levels '8,2,8': 8 is given twice"),
    ("--train-levels", "4-1", "--train-levels '4-1': range 4-1 is empty"),
    ("--arms", "plain,plain", "--arms plain,plain: expected plain, managed or both"),
])
def test_recall_lists_are_refused(flag, value, needle, capsys, no_work):
    assert needle in refused(["recall", flag, value], capsys)


@pytest.mark.parametrize("name,out_flag", [("quickstart", "--out"), ("learn", "--runs"), ("repair", "--out"),
                                           ("curriculum", "--out")])
@pytest.mark.parametrize("below", ["", "sub"])
def test_an_output_directory_that_is_a_file_is_refused(name, out_flag, below, tmp_path, capsys, no_work):
    file = tmp_path / "taken"
    file.write_text("keep me\n")
    out = file / below if below else file
    line = refused([name, "--seeds", "0", out_flag, str(out)], capsys)
    assert (f"{out_flag} {out}: {file} is a file, so nothing can be created under it" if below
            else f"{out_flag} {out}: exists and is not a directory") in line
    assert file.read_text() == "keep me\n"


@pytest.mark.parametrize("name", ["recall", "gpu"])
def test_an_output_file_that_cannot_be_written_is_refused(name, tmp_path, capsys, no_work):
    """Their figures are written after the work: a path that cannot take them is refused first."""
    (tmp_path / "dir").mkdir()
    assert f"--out {tmp_path / 'dir'}: is a directory" in refused([name, "--out", str(tmp_path / "dir")], capsys)
    missing = tmp_path / "no" / "figures.json"
    assert f"directory {missing.parent} not found" in refused([name, "--out", str(missing)], capsys)


@pytest.mark.parametrize("argv,needle", [
    (["step", "--threads", "-1"], "--threads >= 0"),
    (["adaptive", "--seed", "-1"], "--seed >= 0"),
    (["curriculum", "--torch-threads", "0", "--out", "{tmp}"], "--torch-threads must be >= 1"),
    (["sandbox", "--rounds", "0"], "--rounds, --exec-rounds, --files and --blocks must be >= 1"),
])
def test_negative_or_zero_counts_are_refused(argv, needle, tmp_path, capsys, no_work):
    line = refused([a.format(tmp=tmp_path / "runs") for a in argv], capsys)
    assert line.startswith(f"posttrain bench {argv[0]}: error: ") and needle in line


def test_parse_seeds_keeps_lists_and_ranges():
    from posttrain.cli.bench import parse_seeds  # (the scripts' shared helper)

    assert parse_seeds("0-2,7") == [0, 1, 2, 7]
    assert parse_seeds("4") == [4]
    assert parse_seeds(" 1 , 3-3") == [1, 3]


@pytest.mark.parametrize("argv,needle", [
    (["repo_agents", "--agents", "oracle,bogus"], "--agents 'oracle,bogus': unknown agent 'bogus' (expected some of oracle, noop,"),
    (["repo_agents", "--agents", "noop,noop"], "--agents 'noop,noop': noop is given twice"),
    (["domain_agents", "--domain", "files", "--agents", "orcale"], "--agents 'orcale': unknown agent 'orcale'"),
    (["domain_agents", "--domain", "cdo"], "argument --domain: invalid choice: 'cdo'"),
    (["cad", "--seed", str(2**32)], "--seed in [0, 2**32); got --tasks 24, --rounds 3, --seed 4294967296"),
    (["cad", "--tasks", "0"], "--tasks and --rounds must be >= 1"),
])
def test_the_agent_sweeps_and_the_cad_bench_check_their_flags(argv, needle, capsys, no_work):
    """They were plain argparse scripts outside ``posttrain bench``: a usage block over the error, and an
    unknown agent ran ``posttrain eval`` once per task set before each failed."""
    line = refused(argv, capsys)
    assert line.startswith(f"posttrain bench {argv[0]}: error: ") and needle in line, line


@pytest.mark.parametrize("name", ["repo_agents", "domain_agents"])
def test_the_agent_sweeps_refuse_an_output_directory_that_is_a_file(name, tmp_path, capsys, no_work):
    (tmp_path / "taken").write_text("mine\n")
    domain = ["--domain", "files"] if name == "domain_agents" else []
    line = refused([name, *domain, "--out", str(tmp_path / "taken")], capsys)
    assert "--out" in line and "taken" in line, line
    assert (tmp_path / "taken").read_text() == "mine\n"
