"""A recipe's generator ``params`` checked before anything is generated: a value of the wrong type,
NaN, or a number past the generator's bounds is one ``ConfigError`` line naming ``params.KEY``, the
value and what was expected, said at once (``max_terms: 1000000000`` held the parse past 20 s and
``True`` for an int field was taken as 1), while the params the docs and configs use still make tasks.
(/tmp/params_sweep/sweep.py swept every value through ``load_recipe``; this file pins the decisive cases.)"""

from __future__ import annotations

import pytest

from posttrain.errors import ConfigError
from posttrain.tasks import TaskSource, load_pools


def _load(generator: str, params: dict, n: int = 2) -> int:
    held = TaskSource(generator="quickstart-math", n=1)
    return len(load_pools([TaskSource(generator=generator, n=n, params=params)], [held], seed=0)[0])


@pytest.mark.parametrize(("generator", "params", "said"), [
    ("rg/basic_arithmetic", {"max_terms": 10**9},
     r"params\.max_terms: expected a whole number in \[0, 12\] .*, got 1000000000$"),
    ("rg/basic_arithmetic", {"min_terms": True}, r"params\.min_terms: expected a whole number, got True$"),
    ("rg/basic_arithmetic", {"allow_parentheses": "abc"}, r"params\.allow_parentheses: expected true or false"),
    ("rg/binary_matrix", {"p_zero": float("nan")}, r"params\.p_zero: expected a finite number, got nan$"),
    ("rg/basic_arithmetic", {"operators": []}, r"params\.operators: expected a non-empty list .* of strings"),
    ("rg/composite", {"datasets": [{"name": "basic_arithmetic", "config": {"max_digits": 10**30}}]},
     r"params\.datasets\[0\]\.config\.max_digits: expected a whole number in \[0, 10\]"),
    # an inner dataset's unknown key: said as the outer one is (it was the inner config's TypeError,
    # "__init__() got an unexpected keyword argument"); its seed would replace the one derived from the source's
    ("rg/composite", {"datasets": [{"name": "basic_arithmetic", "config": {"max_termz": 3}}]},
     r"rg/composite: params\.datasets\[0\]\.config: unknown field\(s\) \['max_termz'\]; basic_arithmetic's "
     r"fields: min_terms, max_terms, .*, whitespace$"),
    ("rg/composite", {"datasets": [{"name": "spell_backward", "config": {"seed": 3}}]},
     r"params\.datasets\[0\]\.config\.seed: set by the task source \(seed of the source\), not a param$"),
    ("rg/composite", {"datasets": [{"name": "basic_arithmetic", "config": 5}]},
     r"params\.datasets\[0\]\.config: expected a mapping of basic_arithmetic's fields, got 5$"),
    ("rg/composite", {"datasets": [{"name": "basic_arithmetic", "config": {"min_terms": 5, "max_terms": 3}}]},
     r"rg/composite: params\.datasets\[0\]\.config \{'min_terms': 5, 'max_terms': 3\}: the generator refuses its "
     r"configuration: params\.datasets\[0\]\.config\.min_terms: expected at most max_terms \(3\), got 5$"),
    ("doc", {"filler": None}, r"^tasks.train\[0\]: doc: params\.filler: expected a whole number in 0\.\.1000"),
    ("files", {"sizes": 3}, r"files: params\.sizes: unknown generator param; expected kinds$"),
])
def test_a_bad_param_is_one_line_naming_it_before_any_task_is_made(generator: str, params: dict, said: str) -> None:
    with pytest.raises(ConfigError, match=said) as e:
        _load(generator, params)
    assert "\n" not in str(e.value) and str(e.value).startswith("tasks.train[0]: ")


@pytest.mark.parametrize(("generator", "params"), [
    ("rg/basic_arithmetic", {"min_terms": 2, "max_terms": 3}),  # _sources.py's docstring
    ("rg/countdown", {"min_numbers": 3}),  # docs/tasks.md
    ("rg/word_sorting", {"transformation": "uppercase"}),
    ("rg/count_bits", {"max_n": 10**9}),  # within its own range (levels reach 2**31 - 1)
    ("doc", {"filler": 0, "pdf": False, "kinds": ["figure"]}),  # configs/tiny-doc-files-cad.yaml
    ("files", {"kinds": ["sales", "merge"]}),
])
def test_the_documented_params_still_make_tasks(generator: str, params: dict) -> None:
    assert _load(generator, params) == 2
