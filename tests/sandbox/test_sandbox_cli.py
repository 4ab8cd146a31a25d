"""``posttrain sandbox run`` prints the Execution as JSON; bad arguments exit non-zero."""

from __future__ import annotations

import argparse
import json

import pytest

from posttrain.cli import sandbox as cli
from posttrain.errors import UserError


def _parse(argv):
    p = argparse.ArgumentParser()
    cli.register(p.add_subparsers())
    return p.parse_args(argv)


def test_run_prints_execution_json(capsys):
    args = _parse(["sandbox", "run", "--timeout", "5", "--", "sh", "-c", "echo hi; exit 3"])
    assert args.func(args) == 0  # the sandbox worked; the program's failure is in the JSON
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "error" and out["exit_code"] == 3 and out["stdout"] == "hi\n"


def test_run_with_workspace(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("data")
    tmp_path.chmod(0o755)
    args = _parse(["sandbox", "run", "--workspace", str(tmp_path), "--", "cat", "in.txt"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out)["stdout"] == "data"


@pytest.mark.parametrize(
    "argv",
    [
        ["sandbox", "run"],
        ["sandbox", "run", "--memory-mb", "1", "--", "true"],
        ["sandbox", "run", "--workspace", "/nope", "--", "true"],
    ],
)
def test_bad_arguments_are_user_errors(argv):
    args = _parse(argv)
    with pytest.raises(UserError):
        args.func(args)
