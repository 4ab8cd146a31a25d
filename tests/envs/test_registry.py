"""Domains register by name: in-process (``register_domain``) and from an installed package's entry
point (group ``posttrain.domains``); every lookup reads the registry, and a plugin domain goes
through the same code paths as posttrain's own (task files, a recipe's sources, verification)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from posttrain.envs import domain_names, get_domain, register_domain
from posttrain.errors import ConfigError, TaskError

PLUGIN = Path(__file__).parent / "plugin"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _registrations_end_with_the_test(monkeypatch):
    from posttrain.envs import _registry

    _registry.domain_names()  # posttrain's own and the entry points, as every test sees them
    for table in ("_specs", "_resolved", "_origin"):
        monkeypatch.setattr(_registry, table, dict(getattr(_registry, table)))


def _reverse_env():
    sys.path.insert(0, str(PLUGIN))
    try:
        import reverse_domain
    finally:
        sys.path.remove(str(PLUGIN))
    return reverse_domain.ENV


def test_an_unknown_domain_is_one_line_naming_the_registered_ones() -> None:
    with pytest.raises(TaskError) as e:
        get_domain("nope")
    assert "\n" not in str(e.value) and "unknown domain 'nope'" in str(e.value)
    assert all(d in str(e.value) for d in ("math", "code", "json"))


def test_register_domain_refuses_bad_names_non_envs_and_taken_names() -> None:
    with pytest.raises(ValueError, match="domain name 'Bad Name'"):
        register_domain("Bad Name", get_domain("math"))
    with pytest.raises(ValueError, match="expected a Domain"):
        register_domain("thing", object())
    with pytest.raises(ValueError, match="'math' is already registered"):
        register_domain("math", lambda: get_domain("json"))
    register_domain("math", get_domain("math"))  # the same Env again: nothing changes
    with pytest.raises(ValueError, match="its Domain is named 'math'"):
        register_domain("misnamed", get_domain("math"))
    register_domain("misnamed-later", lambda: get_domain("math"))  # a factory is checked when first looked up
    with pytest.raises(TaskError, match="domain 'misnamed-later' .register_domain.: its Domain is named 'math'"):
        get_domain("misnamed-later")


def test_a_factory_is_called_once_on_first_lookup() -> None:
    calls = []

    def factory():
        calls.append(1)
        return _Renamed(_reverse_env(), "reverse-lazy")

    register_domain("reverse-lazy", factory)
    assert "reverse-lazy" in domain_names() and calls == []
    assert get_domain("reverse-lazy") is get_domain("reverse-lazy") and calls == [1]


class _Renamed:
    """The reverse domain under another name (a registry name and the Env's name must agree)."""

    def __init__(self, env, name: str) -> None:
        self._env, self.name = env, name

    def __getattr__(self, attr):
        return getattr(self._env, attr)


def test_a_domain_registered_in_process_loads_from_a_recipe_and_its_tasks_verify(tmp_path, monkeypatch) -> None:
    from posttrain.tasks import load_tasks
    from posttrain.train.recipe import load_recipe, recipe_tasks, sft_demonstrations

    env = _reverse_env()
    register_domain("reverse", env)
    (tmp_path / "train.jsonl").write_text("".join(
        json.dumps({"id": f"r{i}", "domain": "reverse", "prompt": "Reverse the word.", "word": w}) + "\n"
        for i, w in enumerate(["abc", "posttrain", "domain"])))
    recipe = {"stages": ["sft"], "model": {"name": "embedded", "hidden_size": 32},
              "tasks": {"train": [{"file": "train.jsonl"}], "eval": [{"generator": "reverse", "n": 4}]},
              "sft": {"demonstrations": "references"}}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    monkeypatch.chdir(tmp_path)
    parsed = load_recipe("recipe.yaml")
    train, held = recipe_tasks(parsed)
    assert [t.domain for t in train + held] == ["reverse"] * 7
    verify = get_domain("reverse").make_verifier(None)
    assert all(verify(t, t.reference).passed for t in train + held)
    assert not any(verify(t, env.noop_response(t)).passed for t in train + held)
    assert sft_demonstrations(parsed, train, held)[1] == ("Reverse the word.\nWord: posttrain", "niarttsop")
    # a bad record names the file, the task and the field, as for posttrain's own domains
    (tmp_path / "bad.jsonl").write_text(json.dumps({"id": "b", "domain": "reverse", "prompt": "p", "word": "a1"}))
    with pytest.raises(TaskError, match=r"bad.jsonl:1: task 'b': field 'word': expected letters only"):
        load_tasks(tmp_path / "bad.jsonl")
    recipe["tasks"]["eval"] = [{"generator": "reverse2", "n": 4}]
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    with pytest.raises(ConfigError, match=r"unknown generator .reverse2.; expected a domain \(.*reverse.*\) or a task family"):
        load_recipe("recipe.yaml")


def _install_plugin(site: Path, value: str = "reverse_domain:ENV") -> dict[str, str]:
    """A package installed the way pip leaves one (module + dist-info with entry_points.txt)."""
    site.mkdir(exist_ok=True)
    (site / "reverse_domain.py").write_text((PLUGIN / "reverse_domain.py").read_text())
    info = site / "reverse_domain-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: reverse-domain\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[posttrain.domains]\nreverse = {value}\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}


@pytest.mark.slow
def test_a_package_outside_posttrain_adds_a_domain_by_entry_point(tmp_path) -> None:
    env = _install_plugin(tmp_path / "site")
    good = [{"id": f"r{i}", "domain": "reverse", "prompt": "Reverse the word.", "word": w, "reference": w[::-1]}
            for i, w in enumerate(["abc", "posttrain"])]
    (tmp_path / "good.jsonl").write_text("".join(json.dumps(r) + "\n" for r in good))
    (tmp_path / "bad.jsonl").write_text(json.dumps({**good[0], "reference": "abc"}) + "\n")

    def validate(name: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "posttrain.cli", "tasks", "validate", name], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120)

    ok, bad = validate("good.jsonl"), validate("bad.jsonl")
    assert ok.returncode == 0 and "2 tasks, 0 problem(s)" in ok.stdout, ok.stderr
    assert bad.returncode == 1 and "r0: reference response does not pass: wrong_answer" in bad.stderr
    names = subprocess.run([sys.executable, "-c", "from posttrain.envs import domain_names; print(domain_names())"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert "'reverse'" in names.stdout, names.stderr


def test_a_broken_plugin_is_one_line_naming_its_entry_point(tmp_path) -> None:
    env = _install_plugin(tmp_path / "site", "reverse_domain:MISSING")
    (tmp_path / "t.jsonl").write_text(json.dumps({"id": "r", "domain": "reverse", "prompt": "p", "word": "ab"}))
    out = subprocess.run([sys.executable, "-m", "posttrain.cli", "tasks", "validate", "--no-run", "t.jsonl"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    line = out.stderr.strip()
    assert "\n" not in line and "domain 'reverse'" in line and "reverse_domain:MISSING" in line, line


def test_the_conformance_suite_holds_for_the_plugin_domain() -> None:
    from posttrain.envs.conformance import (
        check_exploits,
        check_generated,
        check_parse_errors,
        check_round_trip,
        check_surface,
    )

    register_domain("reverse", _reverse_env())
    env = get_domain("reverse")
    verify = env.make_verifier(None)

    def verify_pairs(pairs):
        return [verify(task, response) for task, response in pairs]

    assert check_surface("reverse") == []
    assert check_generated(env, verify_pairs) + check_exploits(env, verify_pairs) == []
    assert check_parse_errors(env) + check_round_trip(env) == []


def test_the_quickstart_shorthand_takes_domains_from_the_registry() -> None:
    from posttrain.train.recipe import TasksConfig

    with pytest.raises(ConfigError, match=r"tasks.domains: unknown domain 'chess'; expected one of math, code"):
        TasksConfig(domains=("chess",))
    with pytest.raises(ConfigError, match=r"tasks.domains: domain 'json' has no quickstart family \(quickstart-json\)"):
        TasksConfig(domains=("json",))
    assert TasksConfig(domains=("code",)).domains == ("code",)


def test_an_env_class_is_a_factory_and_a_broken_plugin_call_is_one_line() -> None:
    """A plugin that registers its Env *class* gets an instance (a class has every member as an
    attribute, so it looked like an Env and crashed on first use); a plugin whose task_families()
    raises is one line naming it, also for sources of other domains' families."""
    from posttrain.envs import task_families

    cls = type(_reverse_env())
    register_domain(_reverse_env().name, cls)
    assert isinstance(get_domain(_reverse_env().name), cls)

    class Broken(_Renamed):
        def task_families(self):
            raise KeyError("oops")

    register_domain("broken-families", lambda: Broken(_reverse_env(), "broken-families"))
    with pytest.raises(TaskError) as e:
        task_families()
    assert "\n" not in str(e.value) and "domain 'broken-families'" in str(e.value) and "KeyError" in str(e.value)


def test_built_in_families_import_only_their_domain_and_a_broken_plugin_breaks_no_such_recipe(tmp_path) -> None:
    """A recipe of quickstart-math imports the math domain alone (it imported every domain: torch via
    bfcl), and an installed plugin whose entry point fails to import does not fail it (it did); a
    recipe naming an unknown family still gets one line listing the known ones and the broken plugin."""
    env = _install_plugin(tmp_path / "site", "no_such_module:ENV")
    script = """
import sys
from posttrain.errors import ConfigError
from posttrain.tasks import TaskSource, load_pools
train, held = load_pools([TaskSource(generator="quickstart-math", skip=10)],
                         [TaskSource(generator="quickstart-math", n=10)], seed=0)
print(len(train), len(held), sorted({m.split(".")[2] for m in sys.modules if m.startswith("posttrain.envs.")}),
      "torch" in sys.modules)
load_pools([TaskSource(generator="repair", n=5)], [TaskSource(generator="quickstart-code", n=5)], seed=0)
print(sorted({m.split(".")[2] for m in sys.modules if m.startswith("posttrain.envs.")}))
try:
    TaskSource(generator="quickstart-mth", n=5)
except ConfigError as e:
    print(e)
"""
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, second, error = out.stdout.strip().split("\n")
    assert first == "710 10 ['_base', '_defaults', '_env', '_hooks', '_registry', '_repair', '_turns', 'math', 'rg'] False"  # rg: its names table
    assert second == "['_base', '_defaults', '_env', '_hooks', '_registry', '_repair', '_turns', 'code', 'math', 'rg']"
    assert "unknown generator 'quickstart-mth'" in error and "quickstart-math" in error and "repair" in error
    assert "domain 'reverse'" in error and "no_such_module" in error


def test_built_in_families_are_their_domains_own(monkeypatch) -> None:
    """Each domain is the one source of its families (no table copies them)."""
    from posttrain.envs import find_task_family, task_families

    assert {f: d for f, (d, _) in task_families().items()} == {
        "quickstart-math": "math", "quickstart-code": "code", "humaneval": "code", "repair": "code"}
    assert find_task_family("humaneval")[0] == "code" and find_task_family("nope") is None


def test_a_plugin_family_is_found_in_order_and_may_not_shadow_a_domain_or_a_built_in_family() -> None:
    from posttrain.envs import find_task_family

    class Offers(_Renamed):
        def __init__(self, name: str, families: dict) -> None:
            super().__init__(_reverse_env(), name)
            self.families = families

        def task_families(self):
            return self.families

    def make() -> list:
        return []

    register_domain("offers-a", Offers("offers-a", {"my-family": make}))
    assert find_task_family("my-family") == ("offers-a", make)
    register_domain("offers-b", Offers("offers-b", {"repair": make}))
    with pytest.raises(TaskError, match=r"domain 'offers-b' .register_domain.: task family 'repair' is already "
                                        r"a family of domain 'code'"):
        find_task_family("other")
    with pytest.raises(ValueError, match="'quickstart-code': names starting with 'quickstart-' are task families"):
        register_domain("quickstart-code", Offers("quickstart-code", {}))
