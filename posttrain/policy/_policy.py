"""Policy: a transformers causal LM + its tokenizer, with token-exact sampling.

``Policy.generate`` returns, for each prompt, ``n`` completions with the exact token ids sampled
and their log-probabilities under the sampling distribution (softmax(logits / temperature), no
top-k/top-p truncation), so that training can use exactly what was sampled (DESIGN.md,
"token-exact trajectories"). Text is decoded for the verifier; it is never re-tokenized for training.
It is ``LocalSampler`` (``_sampler.py``) behind a text interface: prompts are encoded with
``encode_prompt``.

Prompts are plain text, or with ``chat`` the tokenizer's chat template over one user message with
the generation prompt (``ChatTemplate.render``), as ids. The choice is saved with the checkpoint
(``CHAT_RECORD``) and read back by ``load_policy``, so an evaluation samples from the prompts the
model was trained on unless told otherwise. A checkpoint without the record (not saved by posttrain,
or before the record existed) loads with plain prompts, as it always did.

Plain prompts start with BOS when the tokenizer has one. A tokenizer that has a BOS token but does not add
it itself is switched to adding it (``add_bos_token``), so that a checkpoint saved from this policy
gives ``AutoTokenizer.from_pretrained(ckpt)(text)`` exactly the ids posttrain trained on (issue 12).

Not here: vLLM/SGLang backends; ``EndpointSampler`` talks to them over HTTP.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from posttrain.errors import UserError
from posttrain.policy._chat import ChatTemplate, ChatTemplateError, has_chat_template, prompt_template
from posttrain.policy._sampler import LocalSampler, SamplingParams
from posttrain.policy._sampling import POSITION_KEYS
from posttrain.types import Generation

ChatSetting = bool | Literal["auto"]
"""Whether prompts are chat-rendered: true, false, or "auto" (when the tokenizer's chat template can
render them: ``resolve_chat``)."""
CHAT_RECORD = "posttrain.json"
"""The file in a checkpoint that records how its prompts are rendered: ``{"chat": true | false}``."""


class Policy:
    """A causal LM and its tokenizer. Build with ``load_policy``.

    ``chat``: prompts are the chat template's rendering of one user message (``self.chat`` is then
    the ``ChatTemplate``, else None); the template must end an assistant turn with the EOS
    (``ChatTemplate.check_end_of_turn``: completions and SFT responses end with it).
    """

    def __init__(self, model: torch.nn.Module, tokenizer, *, path: str | None = None, chat: bool = False) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.path = path
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        _add_bos_when_encoding(tokenizer)
        self.chat: ChatTemplate | None = prompt_template(tokenizer) if chat else None
        if self.chat is not None:
            self.chat.check_end_of_turn()

    @property
    def eos_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    def encode_prompt(self, prompt: str) -> list[int]:
        """Prompt text -> token ids: with ``chat``, ``apply_chat_template([{"role": "user", "content":
        prompt}], add_generation_prompt=True)`` as ids; else the tokenizer's ids, with BOS prepended
        when the tokenizer has one and did not add it. (The embedded default's template renders one
        user message to exactly the plain ids.)"""
        return _encode_prompt(self.tokenizer, self.chat, prompt)

    def encode_completion(self, text: str) -> list[int]:
        """Demonstration text -> completion token ids, ending with EOS (for SFT)."""
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return [*ids, self.eos_token_id]

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[str],
        *,
        n: int = 1,
        temperature: float = 1.0,
        max_new_tokens: int = 64,
        seed: int | None = None,
        batch_size: int = 256,
    ) -> list[list[Generation]]:
        """Sample ``n`` completions per prompt. Returns ``out[prompt_index][sample_index]``.

        ``temperature == 0`` means greedy decoding (logprobs are then those of softmax(logits)).
        """
        params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        flat = [self.encode_prompt(p) for p in prompts for _ in range(n)]
        results = self.sampler(batch_size=batch_size).generate(flat, params)
        return [results[i * n : (i + 1) * n] for i in range(len(prompts))]

    def sampler(self, *, batch_size: int = 256) -> LocalSampler:
        """This policy's model as a token-level ``Sampler``."""
        return LocalSampler(self.model, self.tokenizer, batch_size=batch_size)

    def save(self, path: str | Path) -> Path:
        """save_pretrained (safetensors) of model and tokenizer, and the prompt rendering (``CHAT_RECORD``)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path, safe_serialization=True)
        self.tokenizer.save_pretrained(path)
        record_chat(path, self.chat is not None)
        return path


def _encode_prompt(tokenizer: Any, chat: ChatTemplate | None, prompt: str) -> list[int]:
    """``Policy.encode_prompt`` for a tokenizer and its prompt template (None: plain prompts)."""
    if chat is not None:
        return chat.render([{"role": "user", "content": prompt}])
    ids = list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    bos = tokenizer.bos_token_id
    if bos is not None and (not ids or ids[0] != bos):
        ids = [bos, *ids]
    return ids


def record_chat(path: str | Path, chat: bool) -> None:
    """Write a checkpoint's ``CHAT_RECORD``: whether its prompts are chat-rendered."""
    (Path(path) / CHAT_RECORD).write_text(json.dumps({"chat": chat}) + "\n", encoding="utf-8")


def recorded_chat(path: str | Path) -> bool | None:
    """A checkpoint's recorded prompt rendering (``CHAT_RECORD``), None when it has none; an unreadable
    record is a ``UserError`` naming it."""
    record = Path(path) / CHAT_RECORD
    if not record.is_file():
        return None
    try:
        value = json.loads(record.read_text(encoding="utf-8")).get("chat")
    except (OSError, ValueError, AttributeError):
        value = None
    if not isinstance(value, bool):
        raise UserError(f'{record}: expected {{"chat": true}} or {{"chat": false}} (how the prompts were rendered)')
    return value


def resolve_chat(setting: ChatSetting, tokenizer: Any, *, repair: bool = False) -> bool:
    """``model.chat`` / ``--chat`` against a tokenizer: a bool as given, "auto": whether the tokenizer's
    chat template can render the run's prompts (``chat_unusable`` is None; ``repair``: its episodes
    append feedback as user turns). True on a tokenizer without one is a ``ChatTemplateError``.

    >>> from posttrain.policy import build_char_tokenizer
    >>> resolve_chat("auto", build_char_tokenizer()), resolve_chat(False, build_char_tokenizer())
    (True, False)
    """
    if setting == "auto":
        return chat_unusable(tokenizer, repair=repair) is None
    if setting is True and not has_chat_template(tokenizer):
        prompt_template(tokenizer)  # raises: no chat template, and how to set one
    return bool(setting)


def chat_unusable(tokenizer: Any, *, repair: bool = False) -> str | None:
    """Why ``tokenizer``'s chat template cannot render a run's prompts, None when it can: it has none,
    its end of an assistant turn is not the EOS (``ChatTemplate.check_end_of_turn``), or, with
    ``repair``, it cannot append a user turn to the episode (``check_appends("user")``).

    >>> from posttrain.policy import build_char_tokenizer
    >>> chat_unusable(build_char_tokenizer(), repair=True) is None
    True
    """
    if not has_chat_template(tokenizer):
        return "it has no chat template"
    try:
        chat = prompt_template(tokenizer)
        chat.check_end_of_turn()
        if repair:
            chat.check_appends("user")
    except ChatTemplateError as e:
        return str(e)
    return None


def _add_bos_when_encoding(tokenizer) -> None:
    """Make ``tokenizer(text)`` start with BOS when the tokenizer has one, as ``encode_prompt`` does.

    Only tokenizers that have a BOS token and do not add it are changed, and only through
    transformers' own ``add_bos_token`` switch (saved with the tokenizer); ``encode_prompt``'s ids
    stay the same either way, because it prepends BOS only when it is missing.
    """
    bos = tokenizer.bos_token_id
    if bos is None or not hasattr(type(tokenizer), "add_bos_token"):
        return
    before = list(tokenizer("a b", add_special_tokens=True)["input_ids"])
    if before and before[0] == bos:
        return
    backend = getattr(tokenizer, "backend_tokenizer", None)
    kept = backend.post_processor if backend is not None else None
    tokenizer.add_bos_token = True
    if tokenizer("a b", add_special_tokens=True)["input_ids"] != [bos, *before] and backend is not None:
        # the switch rebuilt a post-processor that did more than BOS (appended EOS, ...): keep the
        # tokenizer as it was; posttrain's ids are the same, an export then differs as before
        tokenizer.add_bos_token = False
        backend.post_processor = kept


def load_policy(name_or_path: str | Path, *, device: str = "cpu", dtype: torch.dtype = torch.float32,
                chat: ChatSetting | None = None) -> Policy:
    """Load a causal LM and tokenizer with ``from_pretrained`` (a local path or a hub name).

    A local directory without a tokenizer, or a tokenizer with no EOS token, is a ``UserError``
    naming the path and what is missing (``inspect_model``). ``chat``: how prompts are rendered
    (``resolve_chat``); None: as the checkpoint records (``CHAT_RECORD``), plain without a record.
    ``chat=True`` on a template that cannot be used (none, or its end of turn is not the EOS) is a
    ``UserError``; "auto" is then plain.

    >>> # policy = load_policy("runs/quickstart/checkpoints/rl")
    """
    from transformers import AutoModelForCausalLM

    where = str(name_or_path)
    if Path(where).is_dir():
        check_tokenizer_files(Path(where))
        check_model_files(Path(where))
        check_declared_positions(Path(where))
        hub: dict[str, Any] = {}
    else:
        hub = hub_source(where)
    tokenizer = _load_tokenizer(where, **hub)
    check_eos(tokenizer, where)
    try:
        # transformers 5.25 does not pass local_files_only on to its adapter lookup: say it twice
        adapter = {"adapter_kwargs": {"local_files_only": True}} if hub else {}
        model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **hub, **adapter)
    except Exception as e:  # the files' fault whatever the kind: transformers and torch raise many on bad files
        raise UserError(f"cannot load model {where!r}: {_one_line(e)}") from e
    model.to(device)
    if chat is None:
        chat = bool(Path(where).is_dir() and recorded_chat(where))
    try:
        return Policy(model, tokenizer, path=where, chat=resolve_chat(chat, tokenizer))
    except ChatTemplateError as e:
        raise UserError(f"{where}: chat-rendered prompts: {e}") from None


HUB_PROBE_S = 5.0
"""How long ``hub_source`` waits to connect to the hub before it calls it unreachable."""


def hub_source(name: str) -> dict[str, Any]:
    """``from_pretrained``'s keywords for a hub name that is not a local directory: none when the hub
    can be reached, ``local_files_only`` when it cannot (or ``HF_HUB_OFFLINE`` is set) and the model
    is in the Hugging Face cache; else a ``UserError`` naming the model and the real cause. Without a
    network, huggingface_hub retried a name it had not cached for about 50 s, printing each retry,
    before its one line. A proxy in the environment is trusted to reach the hub (no probe)."""
    import os
    import socket
    from urllib.parse import urlsplit

    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = isinstance(try_to_load_from_cache(name, "config.json"), str)
    except HFValidationError as e:
        raise UserError(f"model {name}: not a local directory, nor a Hugging Face model name ({e})") from None
    where = f"not a local directory and not in the Hugging Face cache ({constants.HF_HUB_CACHE})"
    if constants.HF_HUB_OFFLINE:
        if cached:
            return {"local_files_only": True}
        raise UserError(f"model {name}: {where}, and HF_HUB_OFFLINE is set")
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return {}
    url = urlsplit(constants.ENDPOINT)
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
        socket.create_connection((url.hostname or "", port), timeout=HUB_PROBE_S).close()
    except (OSError, ValueError) as e:
        if cached:
            return {"local_files_only": True}
        raise UserError(f"model {name}: {where}, and the hub {constants.ENDPOINT} cannot be reached ({e})") from None
    return {}


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model", "sentencepiece.bpe.model")
"""A model directory holds a tokenizer when it has one of these (what ``AutoTokenizer`` reads)."""


@dataclass(frozen=True)
class ModelFacts:
    """What a recipe checks about its model before any work: its positions and its tokenizer."""

    positions: int | None
    """How many positions the model has (``max_position_embeddings``), None if its config does not say."""
    positions_key: str
    """Where ``positions`` comes from, for messages (``PATH/config.json max_position_embeddings``)."""
    tokenizer: Any
    """The model's tokenizer (transformers), loaded from local files."""


def check_tokenizer_files(path: Path) -> None:
    """A ``UserError`` naming ``path`` when the model directory has no tokenizer files."""
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise UserError(f"{path}: the model directory has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                        f"save the tokenizer next to the model (tokenizer.save_pretrained)")


def _one_line(e: BaseException) -> str:
    """``Kind: message`` of a third party's error on one line (some put the cause on the next), clipped."""
    text = " ".join(str(e).split())
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _load_tokenizer(where: str, **kwargs: Any) -> Any:
    """``AutoTokenizer.from_pretrained(where)``, its failure a ``UserError`` naming ``where``: a
    tokenizer.json or tokenizer_config.json that is cut, not JSON or not an object raised json's,
    transformers' KeyError or AttributeError as a traceback."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(where, **kwargs)
    except Exception as e:  # the files' fault whatever the kind (JSONDecodeError, KeyError, AttributeError, ...)
        raise UserError(f"{where}: cannot load the tokenizer ({_one_line(e)})") from None


def _weight_shapes(path: Path) -> dict[str, tuple[tuple[int, ...], Path]] | None:
    """Each tensor the directory's safetensors weights hold: its shape and file, from the headers alone
    (the files its index names, else every ``*.safetensors``); None when it has none (``.bin``
    weights: the load reads those). A file cut short or not safetensors is a ``UserError`` naming it."""
    from safetensors import safe_open

    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
            files = sorted({path / name for name in weight_map.values()})
        except (OSError, ValueError, AttributeError, TypeError) as e:
            raise UserError(f"{index}: not an index of weights ({_one_line(e)}); expected a 'weight_map' of tensor "
                            "names to files") from None
    else:
        files = sorted(path.glob("*.safetensors"))
    if not files:
        return None
    shapes: dict[str, tuple[tuple[int, ...], Path]] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as fh:
                for name in fh.keys():
                    shapes[name] = (tuple(fh.get_slice(name).get_shape()), f)
        except Exception as e:  # SafetensorError (truncated, not safetensors), OSError (missing, a directory)
            raise UserError(f"{f}: not readable safetensors weights ({_one_line(e)}); a copy cut short, or a file "
                            "save_pretrained did not write") from None
    return shapes


def check_model_files(path: Path) -> None:
    """A ``UserError`` naming the file when the local model directory ``path`` cannot give the model
    its config.json describes, read without loading a weight (milliseconds plus an empty,
    meta-device build of the model): a config transformers cannot build (no or an unknown
    ``model_type``, a field of the wrong type, zero heads, a negative size), a safetensors file cut
    short or not one, tensors of another shape than the config gives, or none of the described
    model's tensors at all (``model_type`` naming another architecture). Before, each surfaced from
    ``from_pretrained`` as a traceback, and the last loaded with every weight initialised afresh: a
    silently different model. A config with vastly more layers than its weights (10**6 layers)
    hung in the build; it is refused from the sizes alone."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    cfg_path = path / "config.json"
    arch = read_architecture(path)  # config.json parses to an object, or a UserError naming it
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # transformers' checks of the file raise many kinds (ValueError, TypeError, ZeroDivisionError)
        raise UserError(f"{cfg_path}: not a model config transformers can read ({_one_line(e)})") from None
    shapes = _weight_shapes(path)
    if shapes is None or getattr(config, "quantization_config", None) is not None:
        return  # .bin weights; quantized ones are stored packed, in other shapes than an empty build's
    held = sum(math.prod(shape) for shape, _ in shapes.values())
    if arch.hidden_size and arch.num_layers and arch.num_layers * arch.hidden_size**2 > 16 * max(held, 1):
        # each layer has at least hidden_size**2 parameters (its query projection), and packed weights
        # hold at most 16 per element: a config past that does not describe these weights
        raise UserError(f"{cfg_path}: {arch.num_layers:,} layers of hidden size {arch.hidden_size} describe at least "
                        f"{arch.num_layers * arch.hidden_size**2:,} parameters, the weights hold {held:,}")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # what a model class logs as it is built ("add is_decoder=True") is not ours to show
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as e:  # the config's values: RuntimeError (a negative size), ValueError (not a causal LM), ...
        raise UserError(f"{cfg_path}: transformers cannot build the model it describes ({_one_line(e)})") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    prefix = f"{model.base_model_prefix}."
    matched = 0
    for name, (shape, f) in shapes.items():
        # a base model's checkpoint names its tensors without the prefix; transformers adds it on load
        hit = next((n for n in (name, prefix + name, name.removeprefix(prefix)) if n in expected), None)
        if hit is None:
            continue
        matched += 1
        if expected[hit] != shape:
            raise UserError(f"{f}: tensor {name} has shape {list(shape)}, the {type(model).__name__} that {cfg_path} "
                            f"describes has {list(expected[hit])} there (config and weights of different models)")
    if not matched:
        raise UserError(f"{path}: none of the {len(shapes)} tensors of its weights belongs to the {type(model).__name__} "
                        f"that config.json describes (model_type {config.model_type!r}); expected names such as "
                        f"{next(iter(expected), '?')}, found {next(iter(shapes))}")


def check_eos(tokenizer: Any, where: str) -> None:
    """A ``UserError`` naming ``where`` when the tokenizer has no EOS token (completions end with it)."""
    if tokenizer.eos_token_id is None:
        raise UserError(f"{where}: the tokenizer has no EOS token (set eos_token in tokenizer_config.json); "
                        f"posttrain ends every completion and SFT demonstration with it")


def inspect_model(path: str | Path) -> ModelFacts:
    """The ``ModelFacts`` of a local model directory, read without loading its weights.

    Raises ``UserError`` naming the path and what is missing or unusable: config.json, the weights
    (``check_model_files``), the tokenizer, an EOS token.
    """
    path = Path(path)
    cfg_path = path / "config.json"
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{cfg_path}: cannot read the model's config ({getattr(e, 'strerror', None) or e})") from None
    check_tokenizer_files(path)
    check_model_files(path)
    tokenizer = _load_tokenizer(str(path), local_files_only=True)
    check_eos(tokenizer, str(path))
    key, value = declared_positions(config, cfg_path)
    return ModelFacts(value, f"{cfg_path} {key}" if key else f"{cfg_path}", tokenizer)


def declared_positions(config: Any, cfg_path: str | Path) -> tuple[str | None, int | None]:
    """``(key, positions)`` a model's config.json declares (the first of ``POSITION_KEYS`` it gives),
    ``(None, None)`` when it gives none. A value there that is no positive integer is a ``UserError``
    naming the file and key: it was passed over, and ``generate`` read ``max_position_embeddings: -5``
    as a limit ("exceeds the model's -5 positions"), eval as no limit at all."""
    if not isinstance(config, dict):
        return None, None
    for key in POSITION_KEYS:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{cfg_path} {key}: expected a positive integer (the model's positions), got {value!r}")
        return key, value
    return None, None


def check_declared_positions(path: Path) -> None:
    """``declared_positions`` of the local model directory ``path`` (a config.json that does not read is
    left to ``from_pretrained``, whose error names it)."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    declared_positions(config, path / "config.json")


@dataclass(frozen=True)
class Architecture:
    """A model's shape as its config.json gives it, read without loading the model: what a run's
    header says and RUN/config.yaml records (``model.hidden_size``, ``num_layers``, ``max_positions``).
    A field the config does not give is None."""

    model_type: str
    """transformers' ``model_type`` (``qwen2``, ``llama``, ...)."""
    hidden_size: int | None
    num_layers: int | None
    positions: int | None
    vocab_size: int | None
    keys: dict[str, str]
    """Where each field was read, for messages: ``{"hidden_size": "PATH/config.json hidden_size", ...}``."""


_ARCHITECTURE_KEYS = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "positions": POSITION_KEYS,
    "vocab_size": ("vocab_size",),
}


def read_architecture(path: str | Path) -> Architecture:
    """The ``Architecture`` of a local model directory, from its config.json (a multimodal model's
    ``text_config`` when the top level does not give a field); a ``UserError`` naming the file when
    it cannot be read.

    >>> import json, tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = Path(d, "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 64,
    ...     "num_hidden_layers": 2, "max_position_embeddings": 2048, "vocab_size": 103}))
    >>> a = read_architecture(d)
    >>> a.model_type, a.hidden_size, a.num_layers, a.positions, a.vocab_size
    ('qwen2', 64, 2, 2048, 103)
    """
    cfg_path = Path(path) / "config.json"
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{cfg_path}: cannot read the model's config ({getattr(e, 'strerror', None) or e})") from None
    if not isinstance(config, dict):
        raise UserError(f"{cfg_path}: expected a JSON object (a transformers model config)")
    sections = [("", config)]
    if isinstance(config.get("text_config"), dict):
        sections.append(("text_config.", config["text_config"]))
    found: dict[str, int | None] = {}
    keys: dict[str, str] = {}
    for field, names in _ARCHITECTURE_KEYS.items():
        found[field] = None
        for prefix, section in sections:
            hit = next((n for n in names if _positive_int(section.get(n))), None)
            if hit is not None:
                found[field], keys[field] = section[hit], f"{cfg_path} {prefix}{hit}"
                break
    return Architecture(str(config.get("model_type") or "unknown"), found["hidden_size"], found["num_layers"],
                        found["positions"], found["vocab_size"], keys)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def count_parameters(model: str | Path | Any) -> int | None:
    """How many parameters a causal LM has (tied weights once): ``model`` is a local model directory
    or a transformers config. Counted on an empty (meta-device) copy built from the config: no
    weights are read. None when transformers cannot build it here."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = model if not isinstance(model, (str, Path)) else AutoConfig.from_pretrained(str(model),
                                                                                               local_files_only=True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (OSError, ValueError, KeyError, ImportError):
        return None
    return sum(p.numel() for p in model.parameters())


@dataclass(frozen=True)
class PromptLengths:
    """The longest of some prompts as a local model would be given them (``measure_prompts``)."""

    positions: int | None
    """The model's positions (``ModelFacts.positions``), None when its config does not say."""
    positions_key: str
    """Where ``positions`` comes from, for messages."""
    longest: int
    """Tokens of the longest prompt, exactly as ``Policy.encode_prompt`` encodes it."""
    prompt: str
    """That prompt's text."""


def measure_prompts(path: str | Path, prompts: Sequence[str], *, chat: ChatSetting | None = None) -> PromptLengths:
    """How long the longest of ``prompts`` is for the model in the local directory ``path``, rendered
    as ``load_policy(path, chat=chat)`` would render them (None: as the checkpoint records), read
    without loading its weights. ``UserError``s as ``inspect_model`` and ``load_policy`` raise them."""
    facts = inspect_model(path)
    if chat is None:
        chat = bool(recorded_chat(path))
    try:
        template = prompt_template(facts.tokenizer) if resolve_chat(chat, facts.tokenizer) else None
        if template is not None:
            template.check_end_of_turn()
    except ChatTemplateError as e:
        raise UserError(f"{path}: chat-rendered prompts: {e}") from None
    counts = [len(_encode_prompt(facts.tokenizer, template, p)) for p in prompts]
    at = max(range(len(prompts)), key=counts.__getitem__) if prompts else None
    return PromptLengths(facts.positions, facts.positions_key, 0 if at is None else counts[at],
                         "" if at is None else prompts[at])

