"""Quantized checkpoints -> number formats for `infest import-hf`; never a silent bf16.

Read: DeepSeek `fp8` and gpt-oss `mxfp4` (`quantization_config`); NVIDIA ModelOpt (a
`hf_quant_config.json` beside the config, or inline with `quant_method: modelopt` or a
modelopt `producer`: FP8, NVFP4, W4A8, INT4 AWQ); compressed-tensors (one config group:
FP8, INT8/FP8 W8A8, W4A16 by group, NVFP4); GPTQ and AWQ (bits, group size, zero points);
bitsandbytes (NF4 / FP4, double quantization, 8-bit); and GGUF-style mixes by name
(`--gguf Q4_K_M`), stored as `bits=` at their mean bits per weight. Block formats carry
their scale bytes in bits per weight: GPTQ 4-bit group 128 is 4 + 16/128 (an fp16 scale) +
4/128 (a packed zero point) = 4.15625. Which tensors keep the checkpoint's dtype follows its
ignore list (`ignore`, `exclude_modules`, `modules_to_not_convert`, `llm_int8_skip_modules`).
A quantization field whose value is not understood is an error naming the field.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Mapping

from infest.dsl.errors import SpecError, fail

# Roles a module-name pattern may exclude from quantization (first match wins). A bare
# `.gate` is a router, `gate_proj` is not.
_ROLE_PATTERNS = tuple((role, re.compile(rx)) for role, rx in (
    ("lm_head", r"lm_head"), ("embed", r"embed"), ("router", r"router|\.gate(?![_\w])"),
    ("shared_expert", r"shared_expert"), ("experts", r"experts"), ("attention", r"attn"),
    ("mlp", r"mlp|feed_forward")))
LINEAR_ROLES = ("attention", "mlp", "experts", "shared_expert")
_KEPT_ROLES = ("embed", "router", "lm_head")  # fp8 / mxfp4 / GPTQ / AWQ never quantize these
_LAYER_INDEX = re.compile(r"layers\.(\d+)\.")

# GGUF quantization mixes: mean bits per weight over a whole model file, from llama.cpp
# tools/quantize/README.md ("Llama 2 7B" table); Q4_0 and Q8_0 from their block layout
# (32 weights + one fp16 scale: 4.5 and 8.5 bits), as ggml stores them.
GGUF_BITS = {"Q2_K": "3.35", "Q3_K_S": "3.50", "Q3_K_M": "3.91", "Q3_K_L": "4.27",
             "Q4_0": "4.5", "Q4_K_S": "4.58", "Q4_K_M": "4.84", "Q5_K_S": "5.52",
             "Q5_K_M": "5.68", "Q6_K": "6.56", "Q8_0": "8.5"}
SCALE_BITS = 16       # GPTQ / AWQ / compressed-tensors group scales are fp16 or bf16
BNB_BLOCK = 64        # bitsandbytes 4-bit: one absmax per 64 weights (fp32, or 8-bit +
BNB_DOUBLE_BLOCK = 256  # one fp32 per 256 absmaxes with double quantization)


@dataclass
class Formats:
    """Model-level dtypes plus per-role overrides (role -> {dtype role: dtype}); a `bits`
    entry is a weight format of that many bits per weight (scales included)."""

    weights: str
    kv: str
    act: str
    math: str | None = None
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    scheme: str = ""                                  # for the header comment
    kept: frozenset[str] = frozenset()                # roles left unquantized


class Quant:
    """A quantization section (`prefix` inside file `source`) whose errors name the field."""

    def __init__(self, data: Mapping[str, Any], source: str, prefix: str, layers: int) -> None:
        self.data, self.source, self.prefix, self.layers = data, source, prefix, layers

    def name(self, key: str) -> str:
        """`source: config field 'prefix.key'`, for messages."""
        return f"{self.source}: config field '{self.prefix}.{key}'"

    def sub(self, key: str, data: Mapping[str, Any]) -> "Quant":
        """The section under `key`."""
        return Quant(data, self.source, f"{self.prefix}.{key}", self.layers)

    def bad(self, key: str, hint: str) -> SpecError:
        """An error naming the field and its value."""
        return fail(None, f"{self.name(key)} is {json.dumps(self.data.get(key))}", hint)

    def pick(self, key: str, allowed: tuple, default: Any = None) -> Any:
        """A field that must be one of `allowed` (absent or null: `default`)."""
        value = self.data.get(key)
        value = default if value is None else value
        if isinstance(value, bool) and not any(isinstance(a, bool) for a in allowed) \
                or value not in allowed:
            raise self.bad(key, f"import-hf reads {', '.join(json.dumps(a) for a in allowed)}")
        return allowed[allowed.index(value)]  # 4.0 in a config is read as the 4 allowed

    def kept(self, key: str, default: tuple[str, ...]) -> set[str]:
        """Roles the ignore list `key` keeps unquantized, plus `default`."""
        return set(default) | excluded(self.data.get(key), self.layers, self.name(key))


def excluded(patterns: Any, layers: int, where: str) -> set[str]:
    """The roles a list of module-name patterns keeps out of quantization. A pattern naming
    layer i (`model.layers.3.self_attn*`) counts only when all layers are named; layers past
    the model's (a multi-token-prediction layer) are not part of it."""
    if patterns is None:
        return set()
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise fail(None, f"{where} must be a list of module names")
    whole, per_layer = set(), {}
    for pattern in patterns:
        role = next((r for r, rx in _ROLE_PATTERNS if rx.search(pattern)), None)
        index = _LAYER_INDEX.search(pattern)
        if role is None or (index and int(index.group(1)) >= layers):
            continue
        if index:
            per_layer.setdefault(role, set()).add(int(index.group(1)))
        else:
            whole.add(role)
    for role, indices in per_layer.items():
        if len(indices) < layers and role not in whole:
            raise fail(None, f"{where} keeps {role} unquantized in {len(indices)} of {layers} "
                       "layers only", "import-hf gives a role one format in every layer; "
                       "edit the imported spec's layers by hand")
    return whole | set(per_layer)


def bits_text(bits: Fraction) -> str:
    """Bits per weight as a literal: exact when the fraction is a finite decimal."""
    text = f"{float(bits):.10f}".rstrip("0").rstrip(".")
    return text if Fraction(text) == bits else f"{float(bits):.6f}"


def group_bits(bits: int, group: int, zero_point: bool) -> Fraction:
    """An integer format with one fp16 scale (and a `bits`-wide zero point) per group;
    group -1 is one scale per output row, negligible beside the row."""
    if group == -1:
        return Fraction(bits)
    return bits + Fraction(SCALE_BITS + (bits if zero_point else 0), group)


def quantized(roles: list[str], weight: tuple[str, str], math: str | None) -> dict:
    """Overrides for the quantized roles: their weight format, and math if it changes."""
    over = {weight[0]: weight[1]} | ({"math": math} if math else {})
    overrides = {role: dict(over) for role in roles}
    if "attention" in roles:  # MLA's absorbed kv_b_proj is stored like the projections
        overrides["attention_core"] = {weight[0]: weight[1]}
    return overrides


def scheme_formats(q: Quant, base: str, kept: set[str], weight: tuple[str, str],
                   math: str | None, kv: str, scheme: str) -> Formats:
    """Formats for a scheme that quantizes the linear roles (and the LM head unless kept)."""
    roles = [r for r in LINEAR_ROLES + ("lm_head",) if r not in kept]
    return Formats(base, kv, base, None, quantized(roles, weight, math), scheme,
                   frozenset(kept))


def weight_bits(bits: Fraction) -> tuple[str, str]:
    """A `bits=` weight format."""
    return ("bits", bits_text(bits))


# ---- the schemes -------------------------------------------------------------------------

def gptq(q: Quant, base: str) -> Formats:
    """GPTQ: `bits`-wide integers, one fp16 scale and one packed zero point per group (GPTQ
    stores qzeros even when symmetric); math upcast to `base`. `lm_head: true` quantizes
    the head too."""
    bits = q.pick("bits", (2, 3, 4, 8))
    group = _group(q, "group_size", 128)
    kept = q.kept("modules_to_not_convert", ("embed", "router"))
    if not q.pick("lm_head", (True, False), False):
        kept.add("lm_head")
    if q.data.get("modules_in_block_to_quantize") is not None:
        raise q.bad("modules_in_block_to_quantize", "import-hf quantizes every linear of a "
                    "block; edit the imported spec for a partial scheme")
    total = group_bits(bits, group, zero_point=True)
    return scheme_formats(q, base, kept, weight_bits(total), None, base,
                          f"GPTQ {bits}-bit, group {group}: {bits_text(total)} bits/weight "
                          f"with scales and zero points, {base} math and KV cache")


def _group(q: Quant, key: str, default: int) -> int:
    """A group size: a positive integer or -1 (one scale per output row)."""
    value = q.data.get(key, default)
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or not (value > 0 or value == -1):
        raise q.bad(key, "a group size is a positive integer, or -1 for one per row")
    return value


def awq(q: Quant, base: str) -> Formats:
    """AWQ (AutoAWQ): `bits`-wide integers, one fp16 scale per group and a packed zero point
    when `zero_point`; math upcast to `base`."""
    key = "w_bit" if "w_bit" in q.data and "bits" not in q.data else "bits"
    bits = q.pick(key, (4, 8))
    group = _group(q, "q_group_size" if "q_group_size" in q.data else "group_size", 128)
    zero = q.pick("zero_point", (True, False), True)
    kept = q.kept("modules_to_not_convert", _KEPT_ROLES)
    total = group_bits(bits, group, zero)
    return scheme_formats(q, base, kept, weight_bits(total), None, base,
                          f"AWQ {bits}-bit, group {group}{', zero points' if zero else ''}: "
                          f"{bits_text(total)} bits/weight, {base} math and KV cache")


def bitsandbytes(q: Quant, base: str) -> Formats:
    """bitsandbytes: NF4 / FP4 (4 bits + an fp32 absmax per 64 = 4.5; with double
    quantization an 8-bit absmax per 64 plus an fp32 per 256 of those = 4.127) or LLM.int8
    (8 bits; a row scale, negligible); math upcast to `base`."""
    kept = q.kept("llm_int8_skip_modules", ("embed", "lm_head"))
    if q.pick("load_in_8bit", (True, False), False):
        return scheme_formats(q, base, kept, ("weights", "int8"), None, base,
                              f"bitsandbytes LLM.int8 weights, {base} math and KV cache")
    if not q.pick("load_in_4bit", (True, False), False):
        raise q.bad("load_in_4bit", "a bitsandbytes config loads in 4 or 8 bits")
    kind = q.pick("bnb_4bit_quant_type", ("nf4", "fp4"), "fp4")
    double = q.pick("bnb_4bit_use_double_quant", (True, False), False)
    scale = Fraction(8, BNB_BLOCK) + Fraction(32, BNB_BLOCK * BNB_DOUBLE_BLOCK) if double \
        else Fraction(32, BNB_BLOCK)
    total = 4 + scale
    return scheme_formats(q, base, kept, weight_bits(total), None, base,
                          f"bitsandbytes {kind.upper()}{' (double quant)' if double else ''}: "
                          f"{bits_text(total)} bits/weight, {base} math and KV cache")


def gguf(name: str, base: str) -> Formats:
    """A GGUF mix by name: every weight at the mix's mean bits per weight."""
    if name.upper() not in GGUF_BITS:
        raise fail(None, f"unknown GGUF type '{name}'", f"known: {', '.join(GGUF_BITS)}")
    bits = GGUF_BITS[name.upper()]
    return Formats(f"bits = {bits}", base, base, None, {}, f"GGUF {name.upper()}, {bits} "
                   f"bits/weight on average (llama.cpp's table), {base} math and KV cache")


# ModelOpt quant_algo -> (weight format, math dtype or None for the activation dtype).
# NVFP4 is W4A4 (activations quantized to fp4 inside each GEMM: flops_fp4); W4A8 runs fp8
# math; INT4 AWQ is weight-only. AWQ groups are 128 by default, one fp16 scale each.
_MODELOPT = {"NVFP4": (("weights", "nvfp4"), "nvfp4"),
             "W4A8_NVFP4_FP8": (("weights", "nvfp4"), "fp8"),
             "W4A8_AWQ": (weight_bits(4 + Fraction(SCALE_BITS, 128)), "fp8"),
             "W4A16_AWQ": (weight_bits(4 + Fraction(SCALE_BITS, 128)), None),
             "INT4_AWQ": (weight_bits(4 + Fraction(SCALE_BITS, 128)), None)}


def modelopt(q: Quant, base: str) -> Formats:
    """NVIDIA ModelOpt. FP8: fp8 weights and activations (math at flops_fp8); NVFP4, W4A8,
    INT4 AWQ: the linear roles in that format; KV cache fp8 or nvfp4 if
    kv_cache_quant_algo says so; the embedding, routers and excluded modules stay `base`.
    The inline `quantization_config` newer ModelOpt exports write spells these `ignore`,
    `kv_cache_scheme` and (without quant_algo) a compressed-tensors-style config group."""
    algo = q.pick("quant_algo", ("FP8",) + tuple(_MODELOPT), _modelopt_group_algo(q))
    kv_key = "kv_cache_scheme" if "kv_cache_scheme" in q.data else "kv_cache_quant_algo"
    kv = {"FP8": "fp8", "NVFP4": "nvfp4", None: base}[_modelopt_kv(q, kv_key)]
    kept = q.kept("ignore" if "ignore" in q.data else "exclude_modules", ("embed", "router"))
    if algo == "FP8":
        overrides = {role: {"weights": base, "act": base} for role in kept}
        return Formats("fp8", kv, "fp8", None, overrides,
                       f"ModelOpt FP8 weights and activations, {kv} KV cache", frozenset(kept))
    group = _group(q, "group_size", 16 if "NVFP4" in algo else 128)
    if group != (16 if "NVFP4" in algo else 128):
        raise q.bad("group_size", f"{algo} uses groups of {16 if 'NVFP4' in algo else 128}")
    weight, math = _MODELOPT[algo]
    return scheme_formats(q, base, kept, weight, math, kv,
                          f"ModelOpt {algo} ({weight[1]} weights, {math or base} math), "
                          f"{kv} KV cache")


def _modelopt_group_algo(q: Quant) -> str | None:
    """quant_algo from an inline ModelOpt config group: 4-bit float weights (groups of 16)
    are NVFP4, 8-bit float weights FP8; None without one group to read."""
    groups = q.data.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        return None
    group = next(iter(groups.values()))
    weights = group.get("weights") if isinstance(group, dict) else None
    bits = weights.get("num_bits") if isinstance(weights, dict) else None
    if not isinstance(weights, dict) or weights.get("type") != "float" or bits not in (4, 8):
        raise q.bad("config_groups", "import-hf reads ModelOpt's fp4 (NVFP4) or fp8 groups")
    return {4: "NVFP4", 8: "FP8"}[bits]


def _modelopt_kv(q: Quant, key: str) -> str | None:
    """The KV cache format: "FP8" / "NVFP4" / null, or an fp8 scheme object."""
    value = q.data.get(key)
    if isinstance(value, dict):
        if value.get("type") == "float" and value.get("num_bits") == 8:
            return "FP8"
        raise q.bad(key, "import-hf reads an 8-bit float KV cache scheme")
    return q.pick(key, ("FP8", "NVFP4", None))


def compressed_tensors(q: Quant, base: str) -> Formats:
    """compressed-tensors (llm-compressor): one config group targeting Linear layers; its
    `weights` give the format, `input_activations` the math (null: weight-only, upcast);
    `kv_cache_scheme` an fp8 cache; `ignore` the modules kept at `base`."""
    groups = q.data.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise q.bad("config_groups", "import-hf reads one config group; edit the imported "
                    "spec by hand for mixed schemes")
    (name, group), = groups.items()
    g = q.sub(f"config_groups.{name}", group if isinstance(group, dict) else {})
    if not isinstance(group, dict) or "Linear" not in (group.get("targets") or []):
        raise g.bad("targets", "import-hf reads groups that target \"Linear\"")
    weight = _ct_weights(g.sub("weights", _section(g, "weights")))
    math = _ct_math(g)
    kv = _ct_kv(q, base)
    kept = q.kept("ignore", ("embed", "router"))
    return scheme_formats(q, base, kept, weight, math, kv,
                          f"compressed-tensors {weight[1]} weights, {math or base} math, "
                          f"{kv} KV cache")


def _section(q: Quant, key: str) -> Mapping[str, Any]:
    value = q.data.get(key)
    if not isinstance(value, dict):
        raise q.bad(key, "expected an object")
    return value


def _ct_weights(w: Quant) -> tuple[str, str]:
    """A compressed-tensors weight format: fp8, nvfp4 (fp4 in groups of 16), int8, or an
    integer format with an fp16 scale (and a zero point if asymmetric) per group."""
    kind = w.pick("type", ("int", "float"), "int")
    bits = w.pick("num_bits", (4, 8))
    strategy = w.pick("strategy", ("tensor", "channel", "group", "block", "tensor_group"))
    if kind == "float":
        if bits == 8:
            return ("weights", "fp8")  # a per-tensor, -row or 128x128-block fp32 scale
        if strategy == "tensor_group" and w.data.get("group_size") == 16:
            return ("weights", "nvfp4")
        raise w.bad("group_size", "fp4 weights are read as nvfp4: strategy tensor_group, 16")
    if strategy in ("tensor", "channel"):
        return ("weights", "int8") if bits == 8 else weight_bits(Fraction(bits))
    if strategy != "group":
        raise w.bad("strategy", "integer weights are read per tensor, channel or group")
    symmetric = w.pick("symmetric", (True, False), True)
    return weight_bits(group_bits(bits, _group(w, "group_size", 128), not symmetric))


def _ct_math(g: Quant) -> str | None:
    """The math dtype from `input_activations` (null: weight-only, math upcast)."""
    acts = g.data.get("input_activations")
    if acts is None:
        return None
    a = g.sub("input_activations", _section(g, "input_activations"))
    kind, bits = a.pick("type", ("int", "float"), "int"), a.pick("num_bits", (4, 8))
    return {("float", 8): "fp8", ("int", 8): "int8", ("float", 4): "nvfp4"}.get(
        (kind, bits)) or _raise(a.bad("num_bits", "activations are read as fp8, int8 or fp4"))


def _ct_kv(q: Quant, base: str) -> str:
    """The KV cache dtype from `kv_cache_scheme` (null: the model's)."""
    if q.data.get("kv_cache_scheme") is None:
        return base
    kv = q.sub("kv_cache_scheme", _section(q, "kv_cache_scheme"))
    kv.pick("type", ("float",), "float")
    kv.pick("num_bits", (8,))
    return "fp8"


def _raise(error: SpecError) -> str:
    raise error


def fp8_dynamic(q: Quant, base: str) -> Formats:
    """quant_method fp8 (DeepSeek): fp8 weights, activations quantized inside each GEMM,
    so linears run at flops_fp8; the attention core over the cache stays in `base`."""
    kept = q.kept("modules_to_not_convert", _KEPT_ROLES)
    overrides = {role: {"weights": base, "math": base} for role in kept}
    overrides["embed"] = {"weights": base}  # a gather: no math
    overrides["attention_core"] = {"math": base}
    fmt = re.sub(r"[^\w]", "", str(q.data.get("fmt", "e4m3")))[:20]
    scheme = f"fp8 weights ({fmt}) and fp8 GEMMs, {base} KV cache"
    return Formats("fp8", base, base, "fp8", overrides, scheme, frozenset(kept))


def mxfp4(q: Quant, base: str) -> Formats:
    """quant_method mxfp4 (gpt-oss): mxfp4 weights, math upcast to the activation dtype."""
    kept = q.kept("modules_to_not_convert", _KEPT_ROLES)
    roles = [r for r in LINEAR_ROLES if r not in kept]
    overrides = {role: {"weights": "mxfp4"} for role in roles}
    scheme = f"mxfp4 weights, math and KV cache in {base}"
    return Formats(base, base, base, None, overrides, scheme, frozenset(kept))


_METHODS = {"fp8": fp8_dynamic, "mxfp4": mxfp4, "modelopt": modelopt, "gptq": gptq,
            "awq": awq, "bitsandbytes": bitsandbytes, "compressed-tensors": compressed_tensors}
# Top-level config keys that announce a quantization import-hf does not read (MLX, old
# compressed-tensors): an error, never a silent bf16.
_FOREIGN = ("quantization", "compression_config")


def formats(data: Mapping[str, Any], source: str, base: str, layers: int,
            quant_file: tuple[Mapping[str, Any], str] | None, gguf_type: str | None) -> Formats:
    """The model's number formats: `base` changed by the one quantization that applies."""
    qc = data.get("quantization_config")
    if quant_file is not None and _is_modelopt(qc):
        qc = None  # ModelOpt writes both: the inline block mirrors hf_quant_config.json
    given = [w for w, on in (("quantization_config", qc is not None),
                             ("hf_quant_config.json", quant_file is not None),
                             ("--gguf", gguf_type is not None)) if on]
    if len(given) > 1:
        raise fail(None, f"{source}: both {given[0]} and {given[1]} give a quantization",
                   "pass one of them")
    foreign = next((k for k in _FOREIGN if data.get(k) is not None), None)
    if foreign and not given:
        raise fail(None, f"{source}: config field '{foreign}' is not a quantization import-hf "
                   "reads", f"known quant_method values: {', '.join(_METHODS)}; or --gguf")
    if gguf_type is not None:
        return gguf(gguf_type, base)
    if quant_file is not None:
        data, where = quant_file
        section = data.get("quantization")
        if not isinstance(section, dict):
            raise fail(None, f"{where}: missing required field 'quantization'")
        return modelopt(Quant(section, where, "quantization", layers), base)
    if qc is None:
        return Formats(base, base, base)
    if not isinstance(qc, dict):
        raise fail(None, f"{source}: config field 'quantization_config' must be an object")
    return _inline(Quant(qc, source, "quantization_config", layers), base)


def _is_modelopt(qc: Any) -> bool:
    """Whether an inline quantization_config was written by ModelOpt."""
    if not isinstance(qc, dict):
        return False
    producer = qc.get("producer")
    return qc.get("quant_method") == "modelopt" or (
        isinstance(producer, dict) and producer.get("name") == "modelopt")


def _inline(q: Quant, base: str) -> Formats:
    """An inline quantization_config, by quant_method (a modelopt `producer` counts)."""
    producer = q.data.get("producer")
    if isinstance(producer, dict) and producer.get("name") == "modelopt" \
            and q.data.get("quant_method") is None:
        return modelopt(q, base)
    method = q.pick("quant_method", tuple(_METHODS))
    out = _METHODS[method](q, base)
    if method in _OWN_KV or q.data.get("kv_cache_scheme") is None:
        return out
    return _with_kv(out, _ct_kv(q, base), base)


# Methods that read `kv_cache_scheme` themselves; for every other form it is read here.
_OWN_KV = ("modelopt", "compressed-tensors")


def _with_kv(out: Formats, kv: str, base: str) -> Formats:
    """A method's formats with the KV cache `kv_cache_scheme` gives (vLLM honours it
    beside any weight format)."""
    scheme = out.scheme.replace(f"{base} KV cache", f"{kv} KV cache")
    if scheme == out.scheme:
        scheme += f"; {kv} KV cache (kv_cache_scheme)"
    return replace(out, kv=kv, scheme=scheme)
