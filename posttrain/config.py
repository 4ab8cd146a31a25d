"""Typed configs from YAML, validated at parse time.

A recipe is a tree of frozen dataclasses. ``parse_config(cls, data, where=...)`` walks it and fails
before any work starts on an unknown key (with the closest known key), a value of the wrong type
(naming the expected type), a number outside its field's declared range, or an invalid
combination (each dataclass's ``__post_init__`` raises ``ConfigError``). ``apply_overrides``
applies ``section.key=value`` strings (the CLI's ``--set``) with the same checks.

Supported field types: bool, int, float, str, Literal[...], X | None, tuple[X, ...],
``Mapping[str, X]`` (string keys; ``Any`` values are taken as YAML gave them), nested
dataclasses, and ``Annotated[int | float, Range(...)]``: every numeric field of a recipe declares
its range in its type (``lr: PositiveFloat``), the way pydantic's ``Annotated[float, Field(gt=0)]``
does, so the check and the message ("rl.lr: expected a number in (0, 1], got -0.001") come from one place.
Non-finite floats (.nan, .inf) are refused everywhere, and so are an integer past 64 bits and a number
of magnitude above ``MAX_FLOAT`` (``_check_size``: the bound of a field with none of its own). Nothing is instantiated by name from the
config (no Hydra ``_target_``, no exec).

YAML is read as YAML 1.2 reads numbers: ``3e-3`` is a float (PyYAML's YAML 1.1 rules make it the
string "3e-3"), ``010`` is ten (1.1: octal 8), and ``1:30``, ``1_000`` and ``0b101`` are strings (1.1:
90, 1000 and 5), in recipe files and in ``--set`` values alike; a key given twice in one mapping is
an error there too (PyYAML keeps the later value, silently), and so is nesting too deep to parse.
A plain ``yes``, ``no``, ``on`` or ``off`` (booleans to YAML 1.1, strings to 1.2) is read as 1.1 reads it
in a boolean field, and refused naming its key anywhere else (a string, a list item, a generator's
``params``), where neither reading is safe (``find_yaml11_word``). A mapping's key is read as its text,
as YAML 1.2 reads it (``params: {on: 3}`` has the key 'on', named so if it is unknown): every mapping of
a recipe is keyed by names, where YAML 1.1's boolean key means nothing. Written back with ``dump_yaml``
(RUN/config.yaml), a string that YAML 1.2 reads as a number (``0o17``, ``1e3``, ``-.5``) is quoted, so
what is written reads back as the same string.

``check_run_dir`` refuses a run directory argument that is there but no directory (a file, a dangling
link, a device); ``check_run_files``, a file in it that a command reads and that is no file.
``check_out_dir(path, what)`` / ``check_out_file`` are the same idea for an output path given on
the command line: refused in one line before any work when it is the wrong kind, lies under a
file, or cannot be created or written.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import os
import re
import stat
import tempfile
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin, get_type_hints

import yaml

from posttrain.errors import ConfigError, UserError
from posttrain.strict_json import finite_number

C = TypeVar("C")


@dataclasses.dataclass(frozen=True)
class Range:
    """The interval a numeric field accepts, declared in its type: ``Annotated[float, Range(gt=0)]``.

    >>> Range(ge=0, lt=1).describe(float)
    'a number in [0, 1)'
    """

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def contains(self, value: float) -> bool:
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.lt is None or value < self.lt)
        )

    def describe(self, tp: type) -> str:
        noun = "an integer" if tp is int else "a number"
        lo = (f"[{_num(self.ge)}", self.ge) if self.ge is not None else (f"({_num(self.gt)}", self.gt)
        hi = (f"{_num(self.le)}]", self.le) if self.le is not None else (f"{_num(self.lt)})", self.lt)
        if lo[1] is not None and hi[1] is not None:
            return f"{noun} in {lo[0]}, {hi[0]}"
        if lo[1] is not None:
            return f"{noun} {'>=' if self.ge is not None else '>'} {_num(lo[1])}"
        if hi[1] is not None:
            return f"{noun} {'<=' if self.le is not None else '<'} {_num(hi[1])}"
        return noun


def _num(x: float | None) -> str:
    return str(int(x)) if x is not None and float(x).is_integer() else str(x)


PositiveInt = Annotated[int, Range(ge=1)]
NonNegativeInt = Annotated[int, Range(ge=0)]
PositiveFloat = Annotated[float, Range(gt=0)]
NonNegativeFloat = Annotated[float, Range(ge=0)]
Fraction = Annotated[float, Range(ge=0, le=1)]
"""A number in [0, 1]."""
Seed = Annotated[int, Range(ge=0, lt=2**32)]
"""numpy's seeds are 32-bit and non-negative."""
LearningRate = Annotated[float, Range(gt=0, le=1)]
"""An optimizer's learning rate: above 1 (``rl.lr: 1e23`` ran) every AdamW step moves each weight by more
than the weights' own scale."""
MAX_STEPS = 10**7
"""The most optimizer steps (or checkpoint interval) a recipe may ask for: a hundred times the longest
run anyone would launch on one machine (``rl.steps: 10**22`` ran, its progress bar never to end)."""
Steps = Annotated[int, Range(ge=1, le=MAX_STEPS)]
MAX_EPOCHS = 10_000
Epochs = Annotated[float, Range(gt=0, le=MAX_EPOCHS)]
"""Passes over a data set: at most ``MAX_EPOCHS`` (``sft.epochs: 1e300`` ran: its step count an integer of
300 digits)."""
MAX_TEMPERATURE = 10.0
"""The hottest sampling temperature: at 10 a model's logits are already near uniform (1e300 was accepted)."""
MAX_INT = 2**63 - 1
"""Every integer field fits in 64 bits (torch's and numpy's int64): a larger one overflowed there, after the
stages before it had run."""
MAX_FLOAT = 1e12
"""Every float field's magnitude is at most this (a weight, a coefficient, a bound): 1e300 is accepted by a
field with no upper bound of its own and overflows to inf where it is squared or summed (``reward.outcome``)."""


class _YAML12Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``3e-3`` / ``1E5`` as floats (YAML 1.2 core schema), refuses a
    key given twice in one mapping (PyYAML keeps the later value, silently: ``rl.steps`` written in
    two places ran with one of them), and refuses aliases that recurse or expand too far
    (``_check_expansion``)."""

    def construct_document(self, node: yaml.Node) -> Any:
        _check_expansion(node)  # before a value is built: a "billion laughs" is refused in linear time
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *base``: its keys may be overridden
                continue
            key, line = self.construct_object(key_node, deep=deep), key_node.start_mark.line + 1
            try:
                if key in first:
                    raise yaml.YAMLError(f"duplicate key {key!r} at line {line} (first at line {first[key]})")
            except TypeError:  # an unhashable key: SafeLoader's own error says so
                continue
            first[key] = line
        return super().construct_mapping(node, deep=deep)


MAX_YAML_NODES = 100_000
"""The most nodes a recipe (or a ``--set`` value) may hold with every alias expanded: the largest
shipped recipe holds a few hundred. A few anchors that each repeat the one before (a "billion
laughs") build a tree of 9**9 strings from 9 short lines, which a consumer that walks it (the task
source's cache key, ``json.dumps``) never finished."""


def _check_expansion(root: yaml.Node) -> None:
    """Refuse an alias that refers to the node it is inside (a cycle), or a tree whose expanded size
    is over ``MAX_YAML_NODES``; counted over shared nodes once each, so the check is linear in the text."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_:
            raise yaml.YAMLError(f"the anchor at line {node.start_mark.line + 1} holds an alias to itself (a "
                                 "recursive anchor)")
        open_.add(id(node))
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else \
            node.value if isinstance(node, yaml.SequenceNode) else []
        total = 1 + sum(size(c) for c in children)
        open_.discard(id(node))
        if total > MAX_YAML_NODES:
            raise yaml.YAMLError(f"aliases expand to more than {MAX_YAML_NODES:,} nodes (the anchor at line "
                                 f"{node.start_mark.line + 1}); write the values out instead")
        sizes[id(node)] = total
        return total

    size(root)


_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_YAML12_NUMBERS = (
    (_INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")),
    (_FLOAT, re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
                        r"|\.(?:nan|NaN|NAN))$"), list("-+.0123456789")),
)
_YAML12Loader.yaml_implicit_resolvers = {  # PyYAML's YAML 1.1 number rules out, the 1.2 core schema's in
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _YAML12Dumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` that also quotes a string YAML 1.2 reads as a number (``dump_yaml``)."""


for _tag, _rx, _first in _YAML12_NUMBERS:
    _YAML12Loader.add_implicit_resolver(_tag, _rx, _first)
    _YAML12Dumper.add_implicit_resolver(_tag, _rx, _first)  # PyYAML copies the resolvers on a class's first add


def dump_yaml(data: Any) -> str:
    """``data`` as YAML that ``parse_yaml`` reads back as the same values, keys in their order.
    ``yaml.safe_dump`` quotes a string only where YAML 1.1 reads another type: ``0o17``, ``1e3``, ``-.5``
    went out plain and came back 15, 1000.0, -0.5 (a str field refused its own run's config; two keys
    ``1e3`` and ``+1e3`` made RUN/config.yaml a duplicate key). Here a string either schema reads as a
    number is quoted too; nothing else about ``safe_dump`` changes, for posttrain or anyone else.

    >>> parse_yaml(dump_yaml({"name": "1e3", "n": 3})), parse_yaml(yaml.safe_dump({"name": "1e3"}))
    ({'name': '1e3', 'n': 3}, {'name': 1000.0})
    """
    return yaml.dump(data, Dumper=_YAML12Dumper, sort_keys=False)


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` as a one-line message quotes a value it was given: whole up to ``limit``
    characters, else its first 40 and how long it is (a ``--set rl.steps=`` of 5,000 digits echoed them all).

    >>> _shown(5), _shown("9" * 5000)
    ('5', "'999999999999999999999999999999999999999... (5000 characters)")
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:40]}... ({len(value) if isinstance(value, str) else len(text)} characters)"


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """A YAML 1.2 integer: decimal (``010`` is ten), ``0o`` octal or ``0x`` hex. PyYAML's 1.1 rules read
    ``010`` as 8, ``1:30`` as 90 (base 60) and ``1_000`` as 1000: ``rl.steps: 010`` ran 8 steps; they are
    strings now, which a numeric field refuses by name."""
    text = loader.construct_scalar(node)
    try:
        return int(text[2:], 8 if text[1] == "o" else 16) if text[:2] in ("0o", "0x") else int(text, 10)
    except ValueError:  # an explicit ``!!int`` on something else, or more digits than Python reads (4300)
        what = ("an integer longer than any field holds (at most 64 bits)"
                if text.lstrip("+-").isdigit() else "not a YAML 1.2 integer")
        raise yaml.constructor.ConstructorError(None, None, f"{_shown(text)} is {what}", node.start_mark) from None


_YAML12Loader.add_constructor(_INT, _construct_int)


class Yaml11Word(str):
    """A plain ``yes``, ``no``, ``on`` or ``off`` (PyYAML's case forms): a boolean to YAML 1.1, a string to
    YAML 1.2. ``parse_yaml`` reads it as this string; ``parse_config`` reads it as YAML 1.1's boolean in a
    boolean field and refuses it anywhere else (``find_yaml11_word``)."""

    @property
    def truth(self) -> bool:
        """What YAML 1.1 reads: ``yes``/``on`` true, ``no``/``off`` false."""
        return self.lower() in ("yes", "on")


def _construct_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool | str:
    """YAML 1.2's booleans are ``true``/``false`` (three case forms); the 1.1-only words are ``Yaml11Word``s."""
    text = loader.construct_scalar(node)
    return text.lower() == "true" if text.lower() in ("true", "false") else Yaml11Word(text)


_YAML12Loader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
_YAML12Dumper.add_representer(Yaml11Word, yaml.SafeDumper.represent_str)  # quoted: it reads back as a string


def find_yaml11_word(data: Any, where: str) -> str | None:
    """A one-line complaint about the first ``Yaml11Word`` value in ``data`` (named by its dotted path
    from ``where``), or None. Where no boolean is expected the two YAMLs disagree and neither reading
    is safe: as 1.1, ``model.name: no`` was the boolean false ("expected a string, got False"); as 1.2,
    a generator's ``params: {hard: no}`` would be the string "no", which Python takes for true.

    >>> find_yaml11_word(parse_yaml("params: {hard: no}"), "tasks.train[0]")
    "tasks.train[0].params.hard: no is false to YAML 1.1 and the string 'no' to YAML 1.2; write true or false, or quote it as a string"
    """
    if isinstance(data, Yaml11Word):
        return (f"{where}: {data} is {str(data.truth).lower()} to YAML 1.1 and the string {str(data)!r} to YAML "
                "1.2; write true or false, or quote it as a string")
    items = data.items() if isinstance(data, Mapping) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        if (found := find_yaml11_word(value, f"{where}[{key}]" if isinstance(data, list) else f"{where}.{key}")):
            return found
    return None


def _takes_bool(tp: Any) -> bool:
    """Whether a field of type ``tp`` takes a boolean (``bool``, ``bool | None``, ``bool | Literal["auto"]``)."""
    if get_origin(tp) is Annotated:
        return _takes_bool(get_args(tp)[0])
    return tp is bool or get_origin(tp) in (typing.Union, types.UnionType) and bool in get_args(tp)


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load`` with YAML 1.2 numbers (``3e-3`` is a float); a duplicate key, nesting
    deeper than the parser's recursion takes, a recursive anchor, or aliases that expand past
    ``MAX_YAML_NODES`` is a ``yaml.YAMLError`` like any other.

    >>> parse_yaml("lr: 3e-3")
    {'lr': 0.003}
    """
    try:
        return yaml.load(text, Loader=_YAML12Loader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise yaml.YAMLError("nested too deeply") from None


def check_run_dir(run_dir: str | Path) -> None:
    """Refuse, in one line naming what it is, a ``RUN_DIR`` (report, audit, tasks stats) that is there
    but is no directory: a file was "run directory not found". Nothing there is left to each command's
    own "not found"."""
    path = Path(run_dir)
    if path.is_dir() or not (path.exists() or path.is_symlink()):
        return
    expected = "expected a run directory (the --out DIR of `posttrain run`)"
    if path.is_file():
        raise UserError(f"{run_dir}: a file, not a directory; {expected}")
    if not path.exists():
        raise UserError(f"{run_dir}: a symbolic link to nothing (or a loop); {expected}")
    raise UserError(f"{run_dir}: a device, socket or pipe, not a directory; {expected}")


RUN_FILES = {"config.yaml": "the run's resolved recipe", "metrics.jsonl": "the run's metrics",
             "summary.json": "the run's summary", "trajectories/*.jsonl": "a records .jsonl file",
             "eval/*.jsonl": "a records .jsonl file"}
"""The files of a run directory that ``report`` reads, each with what it holds (``check_run_files``)."""


def check_run_files(run_dir: str | Path, files: Mapping[str, str] = RUN_FILES) -> None:
    """Refuse, in one line naming what it is, a file of ``run_dir`` that a command reads (``files``: a name
    or a glob -> what it holds) which is there but no regular file: a pipe, a device, a directory or a
    dangling link. ``report`` left a metrics.jsonl, summary.json or config.yaml of these out, silently (a page
    without its curves or eval table), and said "not found" of a records file, as ``tasks stats`` did."""
    root = Path(run_dir)
    for pattern, what in files.items():
        found = sorted(root.glob(pattern)) if "*" in pattern else [root / pattern]
        for path in found:
            if path.is_file() or not (path.exists() or path.is_symlink()):
                continue
            if path.is_dir():  # the readers' own words for a records file or metrics.jsonl
                raise UserError(f"{path}: is a directory, expected {what}")
            kind = "a symbolic link to nothing (or a loop)" if not path.exists() else "a pipe or FIFO" \
                if stat.S_ISFIFO(path.stat().st_mode) else "a device or socket"
            raise UserError(f"{path}: {kind}, not a file; expected {what}")


def check_out_dir(path: str | Path, what: str = "--out") -> Path:
    """Refuse, before any work, an output directory that cannot be used; returns it as a Path.

    Nothing is left behind: the nearest existing ancestor (or ``path`` itself) must be a directory
    in which a file can be created, tried with an unnamed temporary file (the only test that also
    holds for root and for read-only mounts).
    """
    if not str(path):  # Path("") is ".": the run would fill the current directory
        raise UserError(f"{what} '': expected a directory name")
    _refuse_nul(path, what)
    p = Path(path)
    _refuse_dangling_link(p, what)
    if p.exists() and not p.is_dir():
        raise UserError(f"{what} {p}: exists and is not a directory")
    _check_creatable(p, what)
    return p


def check_out_file(path: str | Path, what: str = "--out") -> Path:
    """``check_out_dir`` for an output file: not a directory, and its folder can be made and written."""
    if not str(path):  # Path("") is ".": the file would be the current directory
        raise UserError(f"{what} '': expected a file name")
    _refuse_nul(path, what)
    p = Path(path)
    _refuse_dangling_link(p, what)
    if p.is_dir():
        raise UserError(f"{what} {p}: is a directory; expected a file name")
    _check_creatable(p, what)
    return p


def _refuse_nul(path: str | Path, what: str) -> None:
    """No file name holds a NUL character: ``exists()`` called one absent, and the command failed where it
    made it (``eval --out``: ValueError's traceback after all its work, the evaluation lost)."""
    if "\x00" in str(path):
        raise UserError(f"{what} {str(path)!r}: expected a name without NUL characters")


def _refuse_dangling_link(p: Path, what: str) -> None:
    """A symbolic link that leads nowhere (to nothing, or a loop) is refused by name. It ``exists()``
    not, so the checks saw a directory to make, and the command failed where it made it (``eval --out``
    after all its work: FileExistsError's traceback, the evaluation lost)."""
    if p.is_symlink() and not p.exists():
        raise UserError(f"{what} {p}: a symbolic link to nothing (or a loop); expected a directory or a name "
                        f"to create")


def _check_creatable(p: Path, what: str) -> None:
    probe = p
    while not probe.is_dir():
        if probe.exists() and probe != p:
            raise UserError(f"{what} {p}: {probe} is a file, so nothing can be created under it")
        if probe.parent == probe:
            break
        probe = probe.parent
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        raise UserError(f"{what} {p}: cannot write in {probe} ({e.strerror or e})") from None


MAX_RECIPE_BYTES = 4 << 20
"""The largest recipe file read (the repository's largest is 4 KB)."""


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; a missing file, an empty one or a non-mapping top level is a ConfigError."""
    if "\x00" in str(path):  # stat() raises ValueError on one
        raise ConfigError(f"{str(path)!r}: expected a recipe file name without NUL characters")
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{p}: is a directory, expected a recipe YAML file")
    if not p.is_file():
        raise ConfigError(f"{p}: {_why_not_a_file(p)}")
    if (size := p.stat().st_size) > MAX_RECIPE_BYTES:  # parsed at ~2 MB/s: a 100 MB file took 59 s to refuse
        raise ConfigError(f"{p}: {size:,} bytes; a recipe is at most {MAX_RECIPE_BYTES >> 20} MiB "
                          "(tasks belong in task files the recipe names)")
    try:
        data = parse_yaml(p.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read the recipe ({e})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {' '.join(str(e).split())}") from None
    if data is None:  # an empty file (or only comments) ran every default: the quickstart, 1,200 tasks, for an hour
        raise ConfigError(f"{p}: the recipe is empty; expected a mapping of sections (`{{}}` runs every default)")
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def _why_not_a_file(p: Path) -> str:
    """Why ``p``, neither a regular file nor a directory, is not read as a recipe. A dangling or looping
    symbolic link was "recipe file not found", though ``ls`` lists the name; a pipe (``run <(...)``) too."""
    try:
        mode = p.stat().st_mode
    except OSError as e:
        if not p.is_symlink():
            return "recipe file not found" if e.errno in (errno.ENOENT, errno.ENOTDIR) else \
                f"cannot read the recipe ({e.strerror or e})"
        if e.errno == errno.ELOOP:
            return "a symbolic link loop; expected a recipe YAML file"
        return f"a symbolic link to {os.readlink(p)}, which does not exist; expected a recipe YAML file"
    if stat.S_ISFIFO(mode):  # the run reads it again: --resume, and each torchrun process
        return "a pipe or FIFO, which reads only once (--resume and each torchrun process read the recipe again); " \
               "save it to a file"
    return "a device or socket, not a file; expected a recipe YAML file"


def parse_config(cls: type[C], data: Mapping[str, Any], *, where: str = "") -> C:
    """Build dataclass ``cls`` from a mapping, strictly. ``where`` is the dotted key of ``data``."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'top level'}: expected a mapping for {cls.__name__}, got {type(data).__name__}")
    hints = get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), list(fields), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        full = f"{where}.{key}" if where else str(key)
        raise ConfigError(f"unknown key {_shown(full)}{hint}; known keys here: {', '.join(fields)}")
    kwargs = {name: _coerce(hints[name], value, f"{where}.{name}" if where else name) for name, value in data.items()}
    required = [name for name, f in fields.items() if name not in kwargs and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    if required:  # else cls() raised TypeError ("missing 1 required positional argument"), a traceback
        raise ConfigError(f"{where or cls.__name__}: missing key {required[0]!r}; expected a mapping with "
                          f"{', '.join(repr(n) for n in required)}")
    try:
        return cls(**kwargs)
    except ConfigError as e:  # our own configs' __post_init__ name their fields, most of them fully
        msg = str(e)
        raise ConfigError(msg if not where or msg.startswith(where) else f"{where}: {msg}") from None
    except ValueError as e:  # a library dataclass's own validation
        raise ConfigError(f"{where or cls.__name__}: {e}") from None


def _type_name(tp: Any) -> str:
    if get_origin(tp) is Annotated:
        return _type_name(get_args(tp)[0])
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if get_origin(tp) in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def _check_size(value: float, where: str, expected: str | None) -> None:
    """``MAX_INT`` and ``MAX_FLOAT``: the bounds of every numeric field, in one line naming ``where`` and
    the field's own range (``expected``) where it has one."""
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise ConfigError(f"{where}: expected {expected or 'an integer'} that fits in 64 bits (at most "
                          f"{MAX_INT:,}), got {f'{value:,}' if len(str(value)) <= 40 else _shown(value)}")
    if isinstance(value, float) and abs(value) > MAX_FLOAT:
        raise ConfigError(f"{where}: expected {expected or 'a number'} of magnitude at most {MAX_FLOAT:g}, got "
                          f"{value!r}")


def _coerce(tp: Any, value: Any, where: str, *, sized: bool = True) -> Any:  # noqa: C901 - one branch per type
    """``value`` as type ``tp`` (at ``where``), or a ``ConfigError``; ``sized``: check ``_check_size``
    here (an ``Annotated`` field checks its range first, then the size)."""
    if isinstance(value, Yaml11Word):  # a boolean field reads YAML 1.1's; elsewhere the two YAMLs disagree
        if _takes_bool(tp):
            return value.truth
        raise ConfigError(find_yaml11_word(value, where))
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extras = get_args(tp)
        value = _coerce(base, value, where, sized=False)
        ranges = [x for x in extras if isinstance(x, Range)]
        for rng in ranges:
            if not rng.contains(value):
                raise ConfigError(f"{where}: expected {rng.describe(base)}, got {_shown(value)}")
        if base in (int, float):
            _check_size(value, where, ranges[0].describe(base) if ranges else None)
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        sections = [a for a in args if dataclasses.is_dataclass(a)]
        if isinstance(value, Mapping) and len(sections) == 1:  # a mapping is that section: its own message
            return _coerce(sections[0], value, where)
        lists = [a for a in args if get_origin(a) is tuple]
        if isinstance(value, list | tuple) and len(lists) == 1:  # a list is that list: its item's own message
            return _coerce(lists[0], value, where)
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: expected {_type_name(tp)}, got {_shown(value)}")
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{where}: expected one of {_type_name(tp)}, got {_shown(value)}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {_shown(value)}")
        (item_tp, _) = get_args(tp)
        return tuple(_coerce(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {_shown(value)}")
        (key_tp, item_tp) = get_args(tp)
        bad = next((k for k in value if not isinstance(k, str)), None)
        if key_tp is not str or bad is not None:
            raise ConfigError(f"{where}: expected string keys, got {bad!r}")
        return {k: _coerce(item_tp, v, f"{where}.{k}") for k, v in value.items()}
    if tp is Any:  # taken as YAML gave it, less the words whose reading the two YAMLs dispute
        if (word := find_yaml11_word(value, where)) is not None:
            raise ConfigError(word)
        return value
    if dataclasses.is_dataclass(tp):
        return parse_config(tp, value if value is not None else {}, where=where)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {_shown(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {_shown(value)}")
        if sized:
            _check_size(value, where, None)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {_shown(value)}")
        if not finite_number(value):
            raise ConfigError(f"{where}: expected a finite number, got {_shown(value)}")
        if sized:
            _check_size(float(value), where, None)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {_shown(value)}")
        if "\x00" in value:  # no path, name or address holds one: open() raised ValueError at run time
            raise ConfigError(f"{where}: expected a string without NUL characters, got {_shown(value)}")
        return value
    raise ConfigError(f"{where}: unsupported field type {tp!r}")


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b=value`` overrides (value parsed as YAML) to a nested mapping, in place.

    A key given twice with two values (``rl.steps=5`` then ``rl.steps=6``; ``--backend`` and a
    ``--set sched.backend``), or a section given after a key in it (``rl.steps=5`` then ``rl={lr: 1}``,
    which drops it), is a ``ConfigError`` naming both, as a key given twice in a recipe file is: which one
    the run used was the order's accident. The same value twice, and a key after its section, are fine.
    """
    given: dict[tuple[str, ...], tuple[str, Any]] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {_shown(item)}: expected KEY=VALUE, e.g. rl.steps=50")
        key, raw = item.split("=", 1)
        node = data
        parts = key.strip().split(".")
        if not all(parts):  # ``=3``, ``.seed=3``, ``rl..lr=3``: "unknown key ''", or a section named ''
            raise ConfigError(f"override {_shown(item)}: the key {_shown(key.strip())} has an empty part; expected KEY=VALUE with "
                              f"a dotted key, e.g. rl.steps=50")
        for part in parts[:-1]:
            if node.get(part) is None:  # ``rl:`` with nothing under it is the section at its defaults
                node[part] = {}
            child = node[part]
            if not isinstance(child, dict):
                raise ConfigError(f"override {_shown(item)}: {_shown(part)} is not a section")
            node = child
        try:
            value = parse_yaml(raw)
        except yaml.YAMLError as e:
            raise ConfigError(f"override {_shown(item)}: the value is not valid YAML: {' '.join(str(e).split())}") from None
        _check_not_given(given, tuple(parts), item, value)
        node[parts[-1]] = value
    return data


def _check_not_given(given: dict[tuple[str, ...], tuple[str, Any]], key: tuple[str, ...], item: str, value: Any) -> None:
    """``apply_overrides``' rule against an override that silently undoes an earlier one; records ``key``."""
    for earlier, (text, old) in given.items():
        if earlier == key and old != value:
            raise ConfigError(f"override {_shown(item)}: {'.'.join(key)} is given twice ({_shown(text)} before it); give each key "
                              "once")
        if len(earlier) > len(key) and earlier[: len(key)] == key:
            raise ConfigError(f"override {_shown(item)}: replaces all of {'.'.join(key)}, dropping {_shown(text)} given before "
                              f"it; give {'.'.join(earlier)} inside it, or after it")
    given[key] = (item, value)


def to_dict(obj: Any) -> Any:
    """A dataclass tree -> plain dicts/lists (for saving the resolved config)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [to_dict(v) for v in obj]
    return obj
