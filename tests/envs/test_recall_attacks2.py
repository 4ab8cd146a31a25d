"""The recall domain read by a policy that never reads the question's key: it picks a code by its
place (the note it is in, its rank among the codes, the codes around it). The fact was always alone
in its note, always the last code of a short, dense run of codes at the start, with the codes after
it spread over the rest: "the last code stated alone in the first 7 notes" passed 58 % of
generated tasks and 93 % at level 64 (and "... in the first 6" 64 %), where the domain claims only
the key tells. Generated tasks then stated 3-10 other keys' codes around the fact, as dense after
it as before it; then 5-9, the fact one of 4-6 in the notes ``fact_distances(level)`` before the
question (the best rule here passed about 0.23); now all 6-10 codes are in those notes, each alone
in its note: no place rule passes more than a fifth of the mix below (at most 60 of 400 measured,
chance about 0.13: tests/envs/test_recall_attacks4.py), the gold passes all.

A rule that knows the level and counts notes back from the question passed every task at a fixed
level (the fact was exactly ``level`` notes back), and at levels 1-2 several codes shared a note
(the last code alone was the fact in 81 % and 41 %): tests/envs/test_recall_levels.py."""

from __future__ import annotations

import re

from posttrain.envs.recall import ENV
from posttrain.envs.recall._domain import _pieces, fact_distances

VERIFY = ENV.make_verifier(None)
TASKS = ENV.generate_tasks(200, seed=21) + [t for level in (2, 8, 32, 64) for t in ENV.generate_level(50, level=level,
                                                                                                    seed=22)]
_CODE = re.compile(r"The [a-z ]+ is (\d{4})\.")


def _key_blind(task) -> dict[str, str]:
    """Answers chosen by place alone, from what the episode shows before the question."""
    notes = [p.split(": ", 1)[1] for p in _pieces(task)]
    codes = [(i, m.group(1), m.group(0) == n) for i, n in enumerate(notes) for m in _CODE.finditer(n)]
    alone = [(i, v) for i, v, a in codes if a]
    picks: dict[str, str] = {}
    for k in range(2, 11):
        early = [v for i, v in alone if i < k]
        picks[f"last alone in the first {k} notes"] = early[-1] if early else "0000"
    for i in range(1, 9):
        picks[f"the code in note {i}"] = next((v for j, v, _ in codes if j == i), "0000")
    for k in range(2, 6):
        picks[f"code {k} from the start"] = codes[k - 1][1] if k <= len(codes) else "0000"
        picks[f"code {k} from the end"] = codes[-k][1] if k <= len(codes) else "0000"
    after = [(codes[c + 1][0] if c + 1 < len(codes) else len(notes)) - i for c, (i, _, _) in enumerate(codes)]
    before = [i - (codes[c - 1][0] if c else -1) for c, (i, _, _) in enumerate(codes)]
    picks["the code before the longest code-free run"] = codes[after.index(max(after))][1]
    picks["the code after the longest code-free run"] = codes[before.index(max(before))][1]
    return picks


def test_no_key_blind_rule_passes_more_than_a_fifth() -> None:
    passes: dict[str, int] = {}
    for task in TASKS:
        assert VERIFY(task, task.reference).passed
        for name, answer in _key_blind(task).items():
            passes[name] = passes.get(name, 0) + VERIFY(task, answer).passed
    worst = max(passes, key=passes.__getitem__)
    assert passes[worst] <= len(TASKS) / 5, (worst, passes[worst], len(TASKS))


def test_every_code_is_alone_in_its_note_and_the_fact_within_its_levels_distances() -> None:
    """A note holds a thing or one code; the fact alone in its note, ``fact_distances(level)`` notes
    before the question (it was exactly ``level``, and several codes shared a note at levels 1-2)."""
    for task in TASKS[:: 7]:
        pieces = [p.split(": ", 1)[1] for p in _pieces(task)]
        assert all(len(_CODE.findall(n)) == (_CODE.fullmatch(n) is not None) for n in pieces)
        d = len(task.fields["notes"])
        assert d in fact_distances(int(task.difficulty))
        assert pieces[-1 - d] == f"The {task.fields['key']} is {task.reference}."
        assert sum(f"The {task.fields['key']} is" in n for n in pieces) == 1
