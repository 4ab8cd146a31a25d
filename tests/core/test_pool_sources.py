"""Task sources where users keep them (Parquet, Arrow, Hugging Face ``datasets`` directories, with a
column mapping), a generator's level and params, and the pool's decontamination."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from posttrain.errors import ConfigError, TaskError
from posttrain.tasks import TaskSource, load_pools, load_tasks
from posttrain.tasks._decontaminate import find_contamination
from posttrain.types import Task

ROOT = Path(__file__).resolve().parents[2]

ROWS = [{"uid": f"q{i}", "question": f"What is {i} plus {i}?", "final": str(2 * i), "source": "mine",
         "extra": [i, i]} for i in range(7)]
MAPPING = {"id": "uid", "prompt": "question", "answer": "final"}


def _parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=3)
    return path


def _load(source: TaskSource, eval_n: int = 1) -> list[Task]:
    held = TaskSource(generator="quickstart-math", n=eval_n)
    return load_pools([source], [held], seed=0)[0]


def test_a_parquet_file_streams_in_batches_through_its_column_mapping(tmp_path, monkeypatch) -> None:
    from posttrain.tasks import _columnar

    monkeypatch.setattr(_columnar, "BATCH_ROWS", 2)  # 7 rows in 3 row groups, read 2 at a time
    path = _parquet(tmp_path / "gsm.parquet", ROWS)
    tasks = _load(TaskSource(file=str(path), domain="math", columns=MAPPING))
    assert [t.id for t in tasks] == [f"q{i}" for i in range(7)]
    assert tasks[3].prompt == "What is 3 plus 3?" and tasks[3].fields["answer"] == "6"
    with pytest.raises(ConfigError) as e:  # without a mapping every column is a field: source is not one
        _load(TaskSource(file=str(path), domain="math"))
    assert "gsm.parquet: row 0" in str(e.value) and "unknown field(s)" in str(e.value)


def test_rows_without_ids_get_the_file_stem_and_row(tmp_path) -> None:
    path = _parquet(tmp_path / "plain.parquet", ROWS)
    tasks = _load(TaskSource(file=str(path), domain="math", columns={"prompt": "question", "answer": "final"}))
    assert [t.id for t in tasks[:2]] == ["plain-0", "plain-1"]


def test_a_bad_record_names_file_row_field_and_column(tmp_path) -> None:
    rows = [dict(r) for r in ROWS]
    rows[4]["final"] = ""
    path = _parquet(tmp_path / "bad.parquet", rows)
    with pytest.raises(ConfigError) as e:
        _load(TaskSource(file=str(path), domain="math", columns=MAPPING))
    message = str(e.value)
    assert "\n" not in message and message.startswith("tasks.train[0]: ")
    assert "bad.parquet: row 4" in message and "field 'answer' (column 'final')" in message
    with pytest.raises(ConfigError, match=r"row 0: column 'solution' \(for field 'answer'\): no such column"):
        _load(TaskSource(file=str(path), domain="math", columns={**MAPPING, "answer": "solution"}))
    rows[4]["final"], rows[5]["uid"] = "8", "q1"
    with pytest.raises(ConfigError, match=r"dup.parquet: row 5: duplicate task id 'q1' \(first at .*row 1\)"):
        _load(TaskSource(file=str(_parquet(tmp_path / "dup.parquet", rows)), domain="math", columns=MAPPING))
    rows[5]["uid"] = "q5"
    with pytest.raises(ConfigError, match=r"unknown domain 'algebra'"):
        _load(TaskSource(file=str(_parquet(tmp_path / "dom.parquet", [{**r, "source": "algebra"} for r in rows])),
                         columns={**MAPPING, "domain": "source"}))


def test_datasets_directories_and_their_splits(tmp_path) -> None:
    import datasets

    ds = datasets.Dataset.from_list(ROWS)
    ds.save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": ds, "test": ds.select(range(2))}).save_to_disk(str(tmp_path / "dict"))
    one = _load(TaskSource(file=str(tmp_path / "one"), domain="math", columns=MAPPING))
    test = _load(TaskSource(file=str(tmp_path / "dict"), split="test", domain="math", columns=MAPPING))
    assert len(one) == 7 and [t.id for t in test] == ["q0", "q1"]
    with pytest.raises(ConfigError, match=r"a DatasetDict with splits 'train', 'test': split 'dev' is not one"):
        _load(TaskSource(file=str(tmp_path / "dict"), split="dev", domain="math", columns=MAPPING))
    with pytest.raises(ConfigError, match="set split to one of them"):
        _load(TaskSource(file=str(tmp_path / "dict"), domain="math", columns=MAPPING))


def test_a_directory_of_parquet_shards_and_an_arrow_file(tmp_path) -> None:
    shards = tmp_path / "snapshot" / "data"
    shards.mkdir(parents=True)
    _parquet(shards / "train-00000-of-00002.parquet", ROWS[:4])
    _parquet(shards / "train-00001-of-00002.parquet", ROWS[4:])
    _parquet(shards / "test-00000-of-00001.parquet", ROWS[:1])
    train = _load(TaskSource(file=str(tmp_path / "snapshot"), split="train", domain="math", columns=MAPPING))
    assert [t.id for t in train] == [f"q{i}" for i in range(7)]
    arrow = tmp_path / "rows.arrow"
    with pa.ipc.new_file(str(arrow), pa.Table.from_pylist(ROWS).schema) as writer:
        writer.write_table(pa.Table.from_pylist(ROWS))
    assert len(_load(TaskSource(file=str(arrow), domain="math", columns=MAPPING))) == 7
    records = [{"id": r["uid"], "domain": "math", "prompt": r["question"], "answer": r["final"]} for r in ROWS]
    whole = _parquet(tmp_path / "tasks.parquet", records)
    assert [t.id for t in load_tasks(whole)] == [f"q{i}" for i in range(7)]  # posttrain tasks validate's reader
    (tmp_path / "notes.arrow").write_bytes(b"not arrow")
    with pytest.raises(ConfigError, match="notes.arrow: not an Arrow file"):
        _load(TaskSource(file=str(tmp_path / "notes.arrow"), domain="math"))


def test_source_keys_that_do_not_fit_are_one_line_each() -> None:
    cases = [
        (dict(file="x.jsonl", level=1), "level: only a generator takes a level"),
        (dict(file="x.jsonl", params={"a": 1}), "params: only a generator takes a params"),
        (dict(generator="rg/countdown", n=3, columns={"prompt": "q"}), "columns: only a task file takes columns"),
        (dict(generator="rg/countdown", n=3, split="train"), "split: only a task file takes split"),
        (dict(generator="quickstart-math", level=1), "level: generator 'quickstart-math' is a task family"),
        (dict(generator="math", n=3, params={"a": 1}), "params: the math generator takes no params"),
        (dict(generator="math", n=3, level=1), "level: the math generator has no levels"),
        (dict(generator="rg/countdown", n=3, level=9), "level: the rg/countdown generator's levels are 0..4, got 9"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigError) as e:
            TaskSource(**kwargs)
        assert str(e.value) == message or str(e.value).startswith(message), (kwargs, str(e.value))


def test_a_generator_s_level_and_params_in_a_recipe_source() -> None:
    hard = _load(TaskSource(generator="rg/basic_arithmetic", n=5, level=4, seed=1))
    assert {t.difficulty for t in hard} == {4.0} and hard[0].fields["config"] == {"level": 4}
    two = _load(TaskSource(generator="rg/basic_arithmetic", n=5, params={"min_terms": 2, "max_terms": 2}))
    assert {t.fields["rg_metadata"]["num_terms"] for t in two} == {2}
    with pytest.raises(ConfigError, match=r"^tasks.train\[0\]: rg/basic_arithmetic: params: unknown field"):
        _load(TaskSource(generator="rg/basic_arithmetic", n=5, params={"terms": 2}))


def test_the_pool_refuses_or_drops_training_tasks_that_overlap_evaluation() -> None:
    train = [TaskSource(generator="rg/boxnet", n=200, seed=1)]
    held = [TaskSource(generator="rg/boxnet", n=50, seed=2)]
    assert len(load_pools(train, held, seed=0)[0]) == 200  # no check asked: today's behaviour
    with pytest.raises(ConfigError) as e:
        load_pools(train, held, seed=0, contamination="refuse")
    assert str(e.value).startswith("tasks: 2 of 50 evaluation tasks overlap a training task (e.g. eval ")
    assert "tasks.eval[0], generator rg/boxnet (seed 2)" in str(e.value) and "same prompt" in str(e.value)
    kept, held_tasks = load_pools(train, held, seed=0, contamination="drop")
    assert len(kept) == 198 and find_contamination(kept, held_tasks) == []


def test_generated_pools_overlap_only_where_a_problem_repeats() -> None:
    """Distinct generated problems share template grams: none is flagged; a near-duplicate is."""
    for g in ("rg/countdown", "rg/arc_1d", "rg/knights_knaves", "rg/spell_backward"):
        train, held = load_pools([TaskSource(generator=g, n=60, seed=1)], [TaskSource(generator=g, n=20, seed=2)],
                                 seed=0)
        assert find_contamination(train, held) == [], g
    (t,) = load_pools([TaskSource(generator="rg/knights_knaves", n=1)], [TaskSource(generator="math", n=1)], seed=0)[0]
    near = Task(id="near", domain=t.domain, prompt=t.prompt.replace("knight", "Knight", 1) + " Think.", fields=t.fields)
    assert [c.train_id for c in find_contamination([t], [near])] == [t.id]
    assert json.dumps(TaskSource(file="x.parquet", columns={"prompt": "q"}).columns) == '{"prompt": "q"}'
    with pytest.raises(TaskError):
        load_tasks(Path(__file__))  # a .py file is no task file


def test_a_few_tasks_rendered_with_shared_documentation_are_not_contaminated() -> None:
    """BFCL tasks render their classes' tool documentation (838 of 959 grams of tiny-bfcl's four tasks):
    two training and two evaluation tasks share it, not a problem; a repeated question still overlaps."""
    bfcl = load_tasks(ROOT / "examples" / "tasks" / "bfcl.jsonl")
    train, held = bfcl[2:4], bfcl[:2]
    assert find_contamination(train, held) == []
    copy = Task(id="copy", domain=held[0].domain, prompt=held[0].prompt, fields=held[0].fields)
    assert [c.train_id for c in find_contamination([*train, copy], held)] == ["copy"]
