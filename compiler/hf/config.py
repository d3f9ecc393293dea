"""Reading a Hugging Face config.json for `infest import-hf`: JSON loaded under explicit
limits (file size, nesting, integer length) before Python builds it, and `Config`, typed
accessors whose every error names the field. Nothing from the file is ever evaluated."""
from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping

from infest.dsl.errors import SpecError, fail

# Limits on a config, checked before the work they guard.
MAX_CONFIG_BYTES = 4 << 20   # one config.json (real ones are a few kB)
MAX_JSON_DEPTH = 32          # nested objects / arrays (real configs: 3)
MAX_JSON_INT_DIGITS = 18     # digits in one JSON integer (int64)
MAX_CONTEXT = 2**40          # tokens of a trained context (rope scaling included)


# ---- reading config fields ---------------------------------------------------------

class Config:
    """A config dict with typed, named accessors: every error names the field."""

    def __init__(self, data: Mapping[str, Any], source: str) -> None:
        self.data, self.source = data, source

    def _bad(self, key: str, want: str) -> SpecError:
        got = json.dumps(self.data.get(key))
        return fail(None, f"{self.source}: config field '{key}' must be {want}, got {got}")

    def int(self, key: str, default: int | None = None) -> int:
        """A positive integer field; `default` when absent or null (None: required)."""
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise fail(None, f"{self.source}: missing required config field '{key}'",
                           f"a {self.data.get('model_type')} config needs '{key}'")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self._bad(key, "a positive integer")
        return value

    def opt_int(self, key: str) -> int | None:
        """A positive integer field, or None when absent or null."""
        return None if self.data.get(key) is None else self.int(key)

    def count(self, key: str, default: int = 0) -> int:
        """A non-negative integer field (0 allowed: 'no shared experts')."""
        value = self.data.get(key, default)
        value = default if value is None else value
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._bad(key, "a non-negative integer")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        """A boolean field."""
        value = self.data.get(key, default)
        value = default if value is None else value
        if not isinstance(value, bool):
            raise self._bad(key, "true or false")
        return value

    def str(self, key: str, default: str | None = None) -> str:
        """A string field."""
        value = self.data.get(key, default)
        if value is None:
            raise fail(None, f"{self.source}: missing required config field '{key}'")
        if not isinstance(value, str):
            raise self._bad(key, "a string")
        return value

    def int_list(self, key: str) -> list[int]:
        """A list of non-negative integers (empty when absent)."""
        value = self.data.get(key) or []
        if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise self._bad(key, "a list of layer indices")
        return value


# ---- JSON ---------------------------------------------------------------------------

def load_json(path: Path) -> dict[str, Any]:
    """A JSON object from a regular file of at most MAX_CONFIG_BYTES, or a clear error.
    Nesting and integer length are refused before Python builds them."""
    from infest.compiler.load.files import read_text
    text = read_text(path, limit=MAX_CONFIG_BYTES, limit_name="MAX_CONFIG_BYTES")
    _check_json_depth(text, path)
    try:
        data = json.loads(text, parse_int=lambda digits: _json_int(digits, path),
                          parse_constant=lambda word: _json_constant(word, path))
    except json.JSONDecodeError as exc:
        raise fail(None, f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise fail(None, f"{path}: expected a JSON object (a Hugging Face config.json)")
    return data


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _check_json_depth(text: str, path: Path) -> None:
    """Refuse JSON nested deeper than MAX_JSON_DEPTH (json.loads recurses per level)."""
    depth = 0
    for bracket in re.findall(r"[\[\]{}]", _JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            raise fail(None, f"{path}: JSON nested deeper than MAX_JSON_DEPTH = {MAX_JSON_DEPTH}")


def _json_int(digits: str, path: Path) -> int:
    """A JSON integer of at most MAX_JSON_INT_DIGITS digits (checked before int())."""
    if len(digits.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise fail(None, f"{path}: integer {digits[:12]}... has {len(digits.lstrip('-'))} "
                   f"digits, more than MAX_JSON_INT_DIGITS = {MAX_JSON_INT_DIGITS}")
    return int(digits)


def _json_constant(word: str, path: Path) -> float:
    """NaN and Infinity are not JSON, but Python writes them and published configs carry
    them (Nemotron-H's `time_step_limit: [0.0, Infinity]`): read as floats, as Python does;
    every field import-hf uses must be a whole or finite number, checked where it is read."""
    return float(word)


# ---- fields several families share ------------------------------------------------

def trained_context(cfg: Config) -> int | None:
    """The context the model handles: max_position_embeddings, or a rope scaling's
    original_max_position_embeddings x factor when that is larger (YaRN configs)."""
    stated = cfg.opt_int("max_position_embeddings")
    scaling = cfg.data.get("rope_scaling")
    if not isinstance(scaling, dict) or scaling.get("factor") is None:
        return stated
    rope = Config(scaling, f"{cfg.source} rope_scaling")
    original = rope.opt_int("original_max_position_embeddings")
    factor = scaling["factor"]
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < math.inf:
        raise rope._bad("factor", "a positive finite number")
    scaled = math.floor(Fraction(original) * Fraction(factor)) if original is not None else None
    if scaled is not None and scaled > MAX_CONTEXT:
        raise rope._bad("factor", f"a factor with original x factor at most {MAX_CONTEXT:,} "
                        "tokens (MAX_CONTEXT)")
    return max((c for c in (stated, scaled) if c is not None), default=None)


# ---- wrapped language models ------------------------------------------------------------

# Top-level fields of a wrapped (multimodal) config that describe the language model too.
_SHARED = ("architectures", "tie_word_embeddings", "quantization_config", "torch_dtype")


def text_model(data: Mapping[str, Any], source: str, model_type: str) -> dict[str, Any]:
    """A wrapped config's `text_config` with the top-level fields that apply to it, as a
    config of `model_type` (a vision tower beside it is not read)."""
    text = data.get("text_config")
    if not isinstance(text, dict):
        raise fail(None, f"{source}: config field 'text_config' must be an object (the "
                   "language model's config)", f"a {data.get('model_type')} config keeps "
                   "its language model in text_config")
    merged = dict(text) | {k: data[k] for k in _SHARED if data.get(k) is not None}
    if merged.get("torch_dtype") is None and text.get("dtype") is not None:
        merged["torch_dtype"] = text["dtype"]  # newer configs spell it `dtype`
    return merged | {"model_type": model_type}
