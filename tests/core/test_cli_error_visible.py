"""The CLI's error line is written as it shows (``posttrain.shown.visible``): a value a message carries
unquoted -- a file name, a task id, an argument -- with an ESC, a CR or a U+202E reached the terminal
as is (a colour, a cleared screen, a line turned around or written over). Before: 2 of 2 hostile
names below printed raw; now each is its escape, and a message without such a character prints byte
for byte as before (exit codes unchanged).
"""

from pathlib import Path

import pytest

from posttrain.cli import main

HOSTILE = "a\x1b[31mRED\u202eb\r\x07.jsonl"  # colour, bidi override, carriage return, bell
SHOWN = "a\\x1b[31mRED\\u202eb\\x0d\\x07.jsonl"


def test_a_file_name_with_control_and_bidi_characters_is_escaped(tmp_path: Path, capsys):
    assert main(["tasks", "validate", str(tmp_path / HOSTILE)]) == 2
    assert capsys.readouterr().err == f"posttrain: error: {tmp_path / SHOWN}: no such task file\n"


def test_an_unrecognized_argument_is_escaped(capsys):
    with pytest.raises(SystemExit) as e:
        main(["tasks", "validate", "x.jsonl", "--z\x1b[2J"])
    assert e.value.code == 2
    assert capsys.readouterr().err == "posttrain: error: unrecognized arguments: --z\\x1b[2J (see posttrain --help)\n"


def test_an_ordinary_message_prints_as_it_was(tmp_path: Path, capsys):
    name = tmp_path / "café 中文 'q' \\ é.jsonl"  # not ASCII, quotes, a backslash: all shown as themselves
    assert main(["tasks", "validate", str(name)]) == 2
    assert capsys.readouterr().err == f"posttrain: error: {name}: no such task file\n"
