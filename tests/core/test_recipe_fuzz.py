"""Recipe values a field-by-field fuzz of the shipped recipes found accepted or crashing, each now one
ConfigError naming its field, before any work (the fuzz itself, over thousands of cases, is outside the
suite: /tmp/fuzz/fuzz.py in the commits that added these). Parsed in-process (``parse_yaml`` +
``parse_config``, ``load_recipe`` where the check needs the demonstrations); one case goes through the
real CLI, against a run directory it must leave as it was."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from posttrain.config import parse_config, parse_yaml
from posttrain.errors import ConfigError
from posttrain.train.recipe import Recipe


def parse(text: str) -> Recipe:
    return parse_config(Recipe, parse_yaml(text))


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        # YAML 1.1 numbers PyYAML read silently: base 60, underscores, binary
        ("rl: {steps: 1:30}", "rl.steps: expected an integer, got '1:30'"),
        ("seed: 1_000", "seed: expected an integer, got '1_000'"),
        ("rl: {lr: 1:30.5}", "rl.lr: expected a number, got '1:30.5'"),
        ("eval: {samples_per_task: 0b11}", "eval.samples_per_task: expected an integer, got '0b11'"),
        # a NUL in a path: open() raised ValueError after the parse
        ("tasks: {train: [{file: \"a\\0b.jsonl\"}], eval: [{generator: math, n: 2}]}",
         "tasks.train[0].file: expected a string without NUL characters"),
        ("eval: {baselines: [\"runs/a\\0\"]}", "eval.baselines[0]: expected a string without NUL"),
        # a model name that is neither a directory nor a hub id: from_pretrained's error came after the run dir
        ("model: {name: '   '}", "model.name: '   ' is neither a local model directory nor a hub name"),
        ("model: {name: \"org/my\\nmodel\"}", "model.name: 'org/my\\nmodel' is neither"),
        # a LoRA rank past the model's width, checked for model.lora only: 10**30 was a TypeError at the stage
        ("dpo: {lora: {r: 1000000000000000000}}", "dpo.lora.r: expected at most the model's width"),  # 10**30: past 64 bits
        ("model: {hidden_size: 32}\nrm: {lora: {r: 33}}", "rm.lora.r: expected at most the model's width, "
         "model.hidden_size 32 (a rank above it adds nothing), got 33"),
        # sampled as evaluations are (range(n) episodes per task at once), without eval's cap
        ("pairs: {samples_per_task: 1000000000000000000000000000000}",
         "pairs.samples_per_task: expected an integer in [1, 1024], got 1000000000000000000000000000000"),
        # a list item without its required key: a TypeError traceback from the dataclass
        ("tasks: {sampler: {kind: pool, schedule: [null]}}", "tasks.sampler.schedule[0]: missing key 'step'"),
        ("tasks: {sampler: {kind: pool, schedule: [{weights: {math: 1}}]}}",
         "tasks.sampler.schedule[0]: missing key 'step'"),
        ("reward: [{weight: 2}]", "reward[0]: missing key 'function'"),
        # DAPO's penalty against a budget the sampler never reaches: a completion cut at the cap paid part of it
        ("rl: {max_new_tokens: 32}\nreward: {length: 1.0, max_tokens: 64, overlong_buffer: 16}",
         "reward.max_tokens: 64 is above the completion cap 32"),
        # every canary is built when the recipe is read: 10**30 hung there
        ("tasks: {sampler: {kind: pool, canaries_per_domain: 1000000000000000000000000000000}}",
         "tasks.sampler.canaries_per_domain: expected an integer in [1, 4096]"),
    ],
)
def test_fuzzed_value_is_refused_by_name(text, needle):
    with pytest.raises(ConfigError) as e:
        parse(text)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("text", "value"), [("010", 10), ("0o17", 15), ("0x1f", 31), ("+12", 12), ("09", 9)])
def test_integers_read_as_yaml_1_2(text, value):
    # YAML 1.1 read 010 as octal 8: rl.steps: 010 ran 8 steps
    assert parse(f"rl: {{steps: {text}}}").rl.steps == value


def test_floats_and_words_unchanged():
    r = parse("sft: {lr: 3e-3, epochs: .5}\nrl: {lr: 1.0E-4}\ntracking: {tensorboard: yes}")
    assert (r.sft.lr, r.sft.epochs, r.rl.lr, r.tracking.tensorboard) == (3e-3, 0.5, 1e-4, True)
    with pytest.raises(yaml.YAMLError, match="not a YAML 1.2 integer"):
        parse_yaml("seed: !!int 0b1")


def test_bad_recipe_on_a_run_directory_exits_2_and_keeps_it(tmp_path: Path):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    kept = {out / "config.yaml": "seed: 0\n", out / "summary.json": "{}", out / "checkpoints" / "w": "x"}
    for p, text in kept.items():
        p.write_text(text)
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("rl:\n  steps: 1:30\n")
    proc = subprocess.run([sys.executable, "-m", "posttrain", "run", str(recipe), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "rl.steps: expected an integer, got '1:30'" in lines[0] and str(recipe) in lines[0]
    assert {p: p.read_text() for p in kept} == kept and sorted(out.rglob("*")) == sorted([*kept, out / "checkpoints"])


@pytest.mark.parametrize(
    ("pack_len", "needle"),
    [
        # 10**30: torch.full's TypeError in the sft stage, after the run wrote its directory and evaluated the base
        (10**18, "sft.pack_len: expected at most sft.batch_size x the model's positions (32 x 256 = 8192"),  # and 10**30
        # shorter than a demonstration: refused when the sft stage started, after the same work
        (10, "sft.pack_len: the longest SFT demonstration"),
    ],
)
def test_pack_len_is_checked_against_the_demonstrations_at_parse(pack_len, needle):
    from posttrain.train.recipe import EMBEDDED_RECIPE, load_recipe

    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_recipe(EMBEDDED_RECIPE, [f"sft.pack_len={pack_len}", "tasks.n_train_per_domain=20",
                                      "tasks.n_eval_per_domain=5"])


@pytest.mark.parametrize("text", ["", "# a comment only\n", "---\n"])
def test_an_empty_recipe_file_is_refused(tmp_path: Path, text: str):
    # it ran every default (the quickstart) and exited 0
    from posttrain.config import load_yaml

    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(f"{recipe}: the recipe is empty; expected a mapping of sections")):
        load_yaml(recipe)
    recipe.write_text("{}")
    assert load_yaml(recipe) == {}


def test_a_baseline_that_is_not_utf8_is_named(tmp_path: Path):
    # read_records raised UnicodeDecodeError: a traceback at parse (and in report, audit, eval --baseline)
    from posttrain.train.recipe import EMBEDDED_RECIPE, load_recipe

    bad = tmp_path / "summary.jsonl"
    bad.write_bytes(b'{"id": "\xff\xfe"}\n')
    with pytest.raises(ConfigError, match=re.escape(f"eval.baselines[0]: {bad}:1: not UTF-8 (byte 0xff at column 9)")):
        load_recipe(EMBEDDED_RECIPE, [f"eval.baselines=[{bad}]", "tasks.n_train_per_domain=20",
                                      "tasks.n_eval_per_domain=5"])


def test_a_directory_task_source_is_searched_shallowly_for_a_dataset():
    """``file: /`` walked the whole file system for ``*.parquet`` (a pyarrow test file three levels into a
    virtualenv, or a FileNotFoundError traceback from /proc); a dataset's shards sit at most three folders down."""
    from posttrain.errors import UserError
    from posttrain.tasks._columnar import _shards

    with pytest.raises(UserError, match=r"^/: a directory with no dataset \(no state.json"):
        _shards(Path("/"), None)


def test_a_huge_recipe_file_is_refused_before_it_is_parsed(tmp_path: Path):
    """A 100 MB recipe (a comment) took 59 s of YAML parsing to be refused; its size is read first."""
    import time

    from posttrain.config import MAX_RECIPE_BYTES, load_yaml

    recipe = tmp_path / "r.yaml"
    with recipe.open("wb") as f:
        f.write(b"# " + b"x" * (MAX_RECIPE_BYTES + 1) + b"\n")
    start = time.process_time()
    with pytest.raises(ConfigError, match=re.escape(f"{recipe}: {MAX_RECIPE_BYTES + 4:,} bytes; a recipe is at most 4 MiB")):
        load_yaml(recipe)
    assert time.process_time() - start < 0.5  # parsing it costs ~2 s of CPU
    recipe.write_text("# " + "x" * 100_000 + "\nstages: [sft]\n")  # under the cap: read as before
    assert load_yaml(recipe) == {"stages": ["sft"]}
