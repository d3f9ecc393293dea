"""Write a readable .arch spec from a Hugging Face `config.json` (`infest import-hf`).

The config is read as JSON data only: each number is checked (a positive integer where a
dimension is meant) and formatted into text templates; nothing from the file is ever
evaluated. A config becomes an `Arch` (dimensions, attention, experts, a per-layer plan
and the number formats), and `render` lays that out like the shipped specs: params on
top, one `layer` definition per distinct decoder body (dense, MoE; the window is an
argument), `repeat` blocks calling them, groups, comments.

Families: llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text (dense); mixtral,
qwen3_moe, gpt_oss, minimax_m2 (MoE); glm4_moe (dense first layers, MoE with a shared
expert); llama4 (text_config: chunked attention, dense / MoE layers with a shared expert);
deepseek_v3, deepseek_v32 (plus the lightning indexer) and kimi_k2 (MLA + MoE with a
shared expert). Quantization (compiler/hf_quant.py)
is read from `quantization_config`, a ModelOpt `hf_quant_config.json` beside the config,
or a GGUF type; one that is not understood is an error, never a silent bf16.
"""
from __future__ import annotations

import json
import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, NoReturn

from infest.compiler.hf_quant import Formats, formats
from infest.dsl.errors import SpecError, fail

FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3",
            "deepseek_v32", "kimi_k2", "gpt_oss", "phi3", "glm4_moe", "minimax_m2", "gemma2",
            "gemma3_text", "llama4", "llama4_text")
# Hybrid recurrent/attention families, read and rendered by compiler/hf_hybrid.py.
HYBRID_FAMILIES = ("qwen3_next", "qwen3_5", "qwen3_5_moe", "nemotron_h")
# Vision-language wrappers (and renamed releases) whose language model
# compiler/hf_hybrid.py imports as a family above (its VL_TEXT).
VL_FAMILIES = ("qwen3_vl", "qwen3_vl_moe", "kimi_k25", "mistral3", "qwen2_5_vl", "ministral3")
_MOE_FAMILIES = {"mixtral", "qwen3_moe", "deepseek_v3", "deepseek_v32", "kimi_k2", "gpt_oss",
                 "glm4_moe", "minimax_m2", "llama4_text"}
_MLA_FAMILIES = {"deepseek_v3", "deepseek_v32", "kimi_k2"}
# Gemma: a norm after attention and after the MLP too, tied embeddings by default.
_GEMMA_FAMILIES = {"gemma2", "gemma3_text"}
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_GLU = {"silu": "silu_mul", "swish": "silu_mul", "gelu": "gelu_mul",
        "gelu_pytorch_tanh": "gelu_mul", "gelu_new": "gelu_mul"}
_OP_COLUMN = 54  # where `group` and trailing comments start, as in the shipped specs

# Limits on a config, checked before the work they guard.
MAX_CONFIG_BYTES = 4 << 20   # one config.json (real ones are a few kB)
MAX_JSON_DEPTH = 32          # nested objects / arrays (real configs: 3)
MAX_JSON_INT_DIGITS = 18     # digits in one JSON integer (int64)
MAX_LAYERS = 10_000          # num_hidden_layers: the per-layer plan is built in memory


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


# ---- the intermediate model ----------------------------------------------------------

@dataclass(frozen=True)
class Attention:
    """One model's attention: GQA (optionally windowed) or MLA."""

    heads: int
    kv_heads: int
    head_dim: int
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    qk_norm_whole: bool = False         # one norm over all heads' q (k), not per head
    sinks: bool = False
    window: int | None = None           # the sliding layers' window, if any
    mla: dict[str, int | None] | None = None  # q_lora_rank, kv_lora_rank, rope, nope, v
    indexer: dict[str, int] | None = None     # DeepSeek-V3.2: index_heads, _head_dim, _topk


@dataclass(frozen=True)
class Experts:
    """Routed experts (and a shared expert) of the MoE layers."""

    experts: int
    top_k: int
    ffn: int
    shared_ffn: int = 0
    router_bias: bool = False
    bias: bool = False


@dataclass(frozen=True)
class Layer:
    """What distinguishes one decoder layer from another."""

    sliding: bool
    moe: bool


@dataclass
class Arch:
    """Everything `render` needs, read and checked from a config."""

    name: str
    title: str
    source: str
    family: str
    architecture: str
    hidden: int
    layers: int
    vocab: int
    ffn: int | None
    glu: str
    mlp_bias: bool
    tied: bool
    attention: Attention
    experts: Experts | None
    plan: list[Layer]
    formats: Formats
    context: int | None = None          # trained context in tokens, if the config says
    post_norms: bool = False            # Gemma: RMSNorm on attention and MLP outputs
    notes: tuple[str, ...] = ()         # family-specific header lines (approximations)


# ---- config -> Arch -------------------------------------------------------------------

def load_json(path: Path) -> dict[str, Any]:
    """A JSON object from a regular file of at most MAX_CONFIG_BYTES, or a clear error.
    Nesting and integer length are refused before Python builds them."""
    from infest.compiler.loader import read_text
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


def read_arch(data: Mapping[str, Any], source: str = "config.json",
              quant: tuple[Mapping[str, Any], str] | None = None, name: str | None = None,
              gguf: str | None = None) -> Arch:
    """Check a config (and an optional hf_quant_config, as (data, path), or a GGUF type)
    and build its Arch."""
    data = _text_config(data, source)
    cfg = Config(data, source)
    family = _family(cfg)
    _check_unmodelled(cfg, family)
    hidden, layers = cfg.int("hidden_size"), cfg.int("num_hidden_layers")
    if layers > MAX_LAYERS:
        raise fail(None, f"{source}: config field 'num_hidden_layers' is {layers}, more than "
                   f"MAX_LAYERS = {MAX_LAYERS}")
    plan = _plan(cfg, family, layers)
    experts = _experts(cfg, family) if any(layer.moe for layer in plan) else None
    needs_ffn = any(not layer.moe for layer in plan)
    title = _title(data, source)
    return Arch(name=identifier(name or title or family), title=title or family, source=source,
                family=family, architecture=_architecture(data), hidden=hidden,
                layers=layers, vocab=cfg.int("vocab_size"),
                ffn=cfg.int(_FFN_KEY.get(family, "intermediate_size")) if needs_ffn else None,
                glu=_glu(cfg, family), mlp_bias=cfg.flag("mlp_bias"),
                # transformers' defaults: Gemma ties the LM head to the embedding
                tied=cfg.flag("tie_word_embeddings", family in _GEMMA_FAMILIES),
                attention=_attention(cfg, family, hidden), experts=experts, plan=plan,
                formats=formats(data, source, _base_dtype(cfg), layers, quant, gguf),
                context=trained_context(cfg), post_norms=family in _GEMMA_FAMILIES,
                notes=_family_notes(cfg, family))


# The dense MLP's width where a family keeps intermediate_size for its experts.
_FFN_KEY = {"llama4_text": "intermediate_size_mlp"}
# Fields of a multimodal wrapper (`llama4`) that apply to its text model.
_WRAPPER_FIELDS = ("architectures", "tie_word_embeddings", "quantization_config")


def _text_config(data: Mapping[str, Any], source: str) -> Mapping[str, Any]:
    """A multimodal `llama4` config's text model (`text_config`, with the wrapper's
    architectures, tie_word_embeddings and quantization_config); any other config as is.
    The vision tower is not read: decode never runs it (see _family_notes)."""
    if data.get("model_type") != "llama4":
        return data
    text = data.get("text_config")
    if not isinstance(text, dict):
        raise fail(None, f"{source}: missing required config field 'text_config'",
                   "a llama4 config keeps its text model in text_config")
    return {**text, **{k: data[k] for k in _WRAPPER_FIELDS if k in data},
            "model_type": "llama4_text", "vision_config": data.get("vision_config")}


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
    scaled = int(original * factor) if original is not None else None
    return max((c for c in (stated, scaled) if c is not None), default=None)


def _family(cfg: Config) -> str:
    family = cfg.str("model_type")
    if family not in FAMILIES:
        known = ", ".join(FAMILIES + HYBRID_FAMILIES + VL_FAMILIES)
        raise fail(None, f"{cfg.source}: unknown model_type '{family}'",
                   f"import-hf knows: {known}; write the spec by hand")
    return family


def _architecture(data: Mapping[str, Any]) -> str:
    archs = data.get("architectures")
    ok = isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)
    return ", ".join(_safe(a) for a in archs) if ok else ""


def _safe(text: Any) -> str:
    """Config text bound for a comment: word characters and . + - only (no newline can
    end the comment and start spec text)."""
    return re.sub(r"[^\w.+-]", "", str(text))[:60]


def _title(data: Mapping[str, Any], source: str) -> str:
    """A display name: the file stem (`org--Model.config.json` -> Model)."""
    stem = Path(source).name
    for suffix in (".json", ".config"):
        stem = stem[: -len(suffix)] if stem.endswith(suffix) else stem
    stem = stem.split("--")[-1]
    return "" if stem in ("config", "") else _safe(stem)


def identifier(text: str) -> str:
    """A model name the language accepts: lower case, [a-z0-9_], not starting with a digit."""
    name = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "imported"
    return f"m_{name}" if name[0].isdigit() else name


def _glu(cfg: Config, family: str) -> str:
    # Gemma's modelling code reads hidden_activation (gemma3 configs have only that one).
    key = "hidden_activation" if family in _GEMMA_FAMILIES and \
        cfg.data.get("hidden_activation") is not None else "hidden_act"
    act = cfg.str(key, "silu")
    if act not in _GLU:
        raise fail(None, f"{cfg.source}: config field '{key}' is '{act}'",
                   f"import-hf knows gated MLPs with: {', '.join(_GLU)}")
    return _GLU[act]


def _check_unmodelled(cfg: Config, family: str) -> None:
    """Fields that would change the cost in a way import-hf does not model: an error
    naming the field, never a silent drop."""
    if family == "minimax_m2":
        types = cfg.data.get("attn_type_list")
        if types is not None and (not isinstance(types, list) or any(t != 1 for t in types)):
            raise fail(None, f"{cfg.source}: config field 'attn_type_list' has layers that "
                       "are not full attention (1)", "import-hf models MiniMax-M2's full "
                       "attention only; lightning (linear) attention needs a recurrent mixer")
        if cfg.count("shared_intermediate_size"):
            raise fail(None, f"{cfg.source}: config field 'shared_intermediate_size' is "
                       "not 0", "import-hf models MiniMax-M2 without a shared expert")
        if cfg.data.get("qk_norm_type", "per_layer") != "per_layer":
            raise fail(None, f"{cfg.source}: config field 'qk_norm_type' is "
                       f"{json.dumps(cfg.data.get('qk_norm_type'))}", "known: per_layer")


def _family_notes(cfg: Config, family: str) -> tuple[str, ...]:
    """Header lines on what a family's import approximates."""
    notes = []
    caps = [k for k in ("attn_logit_softcapping", "final_logit_softcapping")
            if cfg.data.get(k) is not None]
    if caps:
        notes.append(f"Soft-capping ({', '.join(caps)}) is not modelled: a tanh and two "
                     "multiplies per logit, a few FLOPs per attention score / vocab entry.")
    if family in _GEMMA_FAMILIES:
        notes.append("Gemma norms: pre- and post-attention, pre- and post-MLP RMSNorms "
                     "(1 + w scaling: same params); the sqrt(hidden) embedding scale is "
                     "one multiply per element, not modelled.")
    if family == "phi3":
        notes.append("Phi-3 stores q/k/v as one qkv_proj and gate/up as one gate_up_proj: "
                     "the same params as separate projections, written here as fused GEMMs.")
    notes += _llama4_notes(cfg) if family == "llama4_text" else []
    if family == "deepseek_v32":
        notes.append("DeepSeek Sparse Attention: the lightning indexer scores every cached "
                     "token (its own fp8 key cache), MLA reads the index_topk it selects; the "
                     "indexer's projections stay whole under tensor parallel, as in vLLM.")
    if cfg.count("num_nextn_predict_layers") or cfg.count("num_mtp_modules"):
        notes.append("Multi-token-prediction layers (num_nextn_predict_layers / "
                     "num_mtp_modules) are a speculative-decoding draft: not modelled.")
    return tuple(notes)


def _llama4_notes(cfg: Config) -> list[str]:
    """Llama 4: how chunked attention is modelled, and what is left out."""
    notes = ["Chunked attention (attention_chunk_size) on the RoPE layers is modelled as "
             "a window of one chunk: a token attends only to earlier tokens of its own "
             "chunk, so a layer holds at most one chunk of KV (engines cache it as a "
             "sliding window of that size); keys, FLOPs and KV reads are taken at the "
             "window's bound min(N, chunk), the worst case at a chunk's end (the mean "
             "over positions is half a chunk). The NoPE layers see the whole context."]
    if cfg.flag("use_qk_norm"):
        notes.append("use_qk_norm: an L2 norm of q and k on the RoPE layers, without "
                     "weights, not costed (about 4 FLOPs per q/k element).")
    if cfg.data.get("vision_config") is not None:
        notes.append("The vision tower and projector (vision_config) are not modelled: "
                     "decode never runs them; Meta's totals (Scout 109B, Maverick 400B) "
                     "include them, its active 17B does not.")
    return notes


def _attention(cfg: Config, family: str, hidden: int) -> Attention:
    heads = cfg.int("num_attention_heads")
    if family in _MLA_FAMILIES:
        return _mla(cfg, heads)
    head_dim = cfg.int("head_dim", hidden // heads)
    if hidden % heads and cfg.opt_int("head_dim") is None:
        raise fail(None, f"{cfg.source}: missing required config field 'head_dim'",
                   f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
    bias = cfg.flag("attention_bias")
    qk_norm = family in ("qwen3", "qwen3_moe", "gemma3_text") or \
        (family in ("glm4_moe", "minimax_m2") and cfg.flag("use_qk_norm"))
    return Attention(heads=heads, kv_heads=cfg.int("num_key_value_heads", heads),
                     head_dim=head_dim, qkv_bias=bias or family == "qwen2",
                     o_bias=bias and family != "glm4_moe",  # GLM: o_proj never has a bias
                     qk_norm=qk_norm, qk_norm_whole=family == "minimax_m2",
                     sinks=family == "gpt_oss", window=_window(cfg, family))


def _mla(cfg: Config, heads: int) -> Attention:
    mla = {"q_lora_rank": cfg.opt_int("q_lora_rank"), "kv_lora_rank": cfg.int("kv_lora_rank"),
           "rope_dim": cfg.int("qk_rope_head_dim"), "nope_dim": cfg.int("qk_nope_head_dim"),
           "v_dim": cfg.int("v_head_dim")}
    indexer = None
    if cfg.data.get("index_topk") is not None:  # DeepSeek-V3.2's sparse attention
        indexer = {"index_heads": cfg.int("index_n_heads"),
                   "index_head_dim": cfg.int("index_head_dim"),
                   "index_topk": cfg.int("index_topk")}
    return Attention(heads=heads, kv_heads=heads, head_dim=mla["v_dim"] or 0, mla=mla,
                     indexer=indexer)


def _window(cfg: Config, family: str) -> int | None:
    """The sliding window of the layers that use one (None: every layer sees everything)."""
    if family in ("qwen2", "qwen3", "qwen3_moe") and not cfg.flag("use_sliding_window"):
        return None
    if family == "llama4_text":
        return cfg.opt_int("attention_chunk_size")
    return cfg.opt_int("sliding_window")


def _layer_types(cfg: Config, family: str, layers: int) -> list[bool]:
    """Per layer: does it use the sliding window?"""
    window = _window(cfg, family) if family not in _MLA_FAMILIES else None
    types = cfg.data.get("layer_types")
    if types is not None:
        return _checked_layer_types(cfg, types, layers, window)
    if window is None:
        return [False] * layers
    if family in ("gpt_oss", "gemma2"):  # transformers' default: sliding, full, sliding, ...
        return [i % 2 == 0 for i in range(layers)]
    if family == "gemma3_text":  # every sliding_window_pattern-th layer is global
        pattern = cfg.int("sliding_window_pattern", 6)
        return [(i + 1) % pattern != 0 for i in range(layers)]
    if family in ("qwen2", "qwen3", "qwen3_moe"):  # windowed from max_window_layers on
        first = cfg.count("max_window_layers", layers)
        return [i >= first for i in range(layers)]
    if family == "llama4_text":
        return _llama4_chunked(cfg, layers)
    return [True] * layers


def _llama4_chunked(cfg: Config, layers: int) -> list[bool]:
    """Llama 4's RoPE layers use chunked attention, its NoPE layers see everything:
    no_rope_layers[i] is 1 on a RoPE layer; transformers' default makes every
    no_rope_layer_interval-th layer (4: layers 3, 7, ...) NoPE."""
    if cfg.data.get("no_rope_layers"):
        flags = cfg.int_list("no_rope_layers")
        if len(flags) != layers:
            raise fail(None, f"{cfg.source}: config field 'no_rope_layers' must list "
                       f"num_hidden_layers ({layers}) entries")
        return [flag != 0 for flag in flags]
    interval = cfg.int("no_rope_layer_interval", 4)
    return [(i + 1) % interval != 0 for i in range(layers)]


def _checked_layer_types(cfg: Config, types: Any, layers: int, window: int | None) -> list[bool]:
    known = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != layers:
        raise fail(None, f"{cfg.source}: config field 'layer_types' must list "
                   f"num_hidden_layers ({layers}) entries")
    for i, t in enumerate(types):
        if t not in known:
            raise fail(None, f"{cfg.source}: config field 'layer_types[{i}]' is "
                       f"{json.dumps(t)}", f"known layer types: {', '.join(known)}")
    if window is None and "sliding_attention" in types:
        raise fail(None, f"{cfg.source}: missing required config field 'sliding_window'",
                   "layer_types has sliding_attention layers")
    return [t == "sliding_attention" for t in types]


def _moe_layers(cfg: Config, family: str, layers: int) -> list[bool]:
    """Per layer: is its MLP routed experts?"""
    if family not in _MOE_FAMILIES:
        return [False] * layers
    if family in _MLA_FAMILIES:
        if cfg.data.get("n_routed_experts") is None:
            return [False] * layers
        first, freq = cfg.count("first_k_dense_replace"), cfg.int("moe_layer_freq", 1)
        return [i >= first and i % freq == 0 for i in range(layers)]
    if family == "glm4_moe":
        return [i >= cfg.count("first_k_dense_replace") for i in range(layers)]
    if family == "llama4_text":  # moe_layers, else every interleave_moe_layer_step-th
        step = cfg.int("interleave_moe_layer_step", 1)
        moe = set(cfg.int_list("moe_layers")) if cfg.data.get("moe_layers") is not None \
            else set(range(step - 1, layers, step))
        return [i in moe for i in range(layers)]
    if family == "qwen3_moe":
        dense, step = set(cfg.int_list("mlp_only_layers")), cfg.int("decoder_sparse_step", 1)
        return [i not in dense and (i + 1) % step == 0 for i in range(layers)]
    return [True] * layers


def _plan(cfg: Config, family: str, layers: int) -> list[Layer]:
    sliding = _layer_types(cfg, family, layers)
    moe = _moe_layers(cfg, family, layers)
    return [Layer(s, m) for s, m in zip(sliding, moe)]


def _experts(cfg: Config, family: str) -> Experts:
    if family in _MLA_FAMILIES:
        ffn = cfg.int("moe_intermediate_size")
        return Experts(cfg.int("n_routed_experts"), cfg.int("num_experts_per_tok"), ffn,
                       shared_ffn=cfg.count("n_shared_experts") * ffn,
                       router_bias=cfg.data.get("topk_method") == "noaux_tc")
    if family == "glm4_moe":  # sigmoid router with e_score_correction_bias, always
        ffn = cfg.int("moe_intermediate_size")
        return Experts(cfg.int("n_routed_experts"), cfg.int("num_experts_per_tok"), ffn,
                       shared_ffn=cfg.count("n_shared_experts") * ffn, router_bias=True)
    if family == "minimax_m2":
        return Experts(cfg.int("num_local_experts"), cfg.int("num_experts_per_tok"),
                       cfg.int("intermediate_size"), router_bias=cfg.flag("use_routing_bias"))
    if family == "llama4_text":  # a shared expert as wide as a routed one, every MoE layer
        ffn = cfg.int("intermediate_size")
        return Experts(cfg.int("num_local_experts"), cfg.int("num_experts_per_tok"), ffn,
                       shared_ffn=ffn)
    if family == "qwen3_moe":
        return Experts(cfg.int("num_experts"), cfg.int("num_experts_per_tok"),
                       cfg.int("moe_intermediate_size"))
    gpt_oss = family == "gpt_oss"
    return Experts(cfg.int("num_local_experts"), cfg.int("num_experts_per_tok"),
                   cfg.int("intermediate_size"), router_bias=gpt_oss, bias=gpt_oss)


# ---- number formats -------------------------------------------------------------------

def _base_dtype(cfg: Config) -> str:
    name = cfg.str("torch_dtype", "bfloat16")
    if name not in _TORCH_DTYPES:
        raise fail(None, f"{cfg.source}: config field 'torch_dtype' is '{name}'",
                   f"known: {', '.join(_TORCH_DTYPES)}")
    return _TORCH_DTYPES[name]


# ---- Arch -> text -----------------------------------------------------------------------

def render(arch: Arch) -> str:
    """The spec text: header comments, params, dtypes, embedding, layers, LM head."""
    lines = _header(arch) + [f'model {arch.name} "{arch.title}" {{']
    lines += _param_lines(arch) + [_dtype_line(arch.formats)] + _policy_lines(arch) + [""]
    lines.append(_op("x = embed(tokens, vocab -> hidden" + _kw(arch, "embed") + ")", 1,
                     group="embedding"))
    lines[-1:-1] = _layer_defs(arch)
    for count, kinds in _runs(arch):
        lines += _repeat(arch, count, kinds)
    head = "logits = linear(rmsnorm(x), hidden -> vocab" + (", tied=1" if arch.tied else "")
    # Engines compute logits only at the position they sample from: one token a sequence.
    lines.append(_op(head + _kw(arch, "lm_head") + ", last_token=1)", 1, group="lm_head"))
    return "\n".join(lines + ["}", ""])


def _policy_lines(arch: Arch) -> list[str]:
    """The shipped specs' policies: `full` (Megatron tensor parallel; routed experts over
    ep with dispatch and combine) and, for MoE, `experts_only`."""
    groups = ["embedding", "attention"] + (["mlp"] if arch.ffn else [])
    if arch.experts and arch.experts.shared_ffn:
        groups.append("shared_expert")
    split = f"split {', '.join(groups + ['lm_head'])} over tp"
    if not arch.experts:
        return [f"  policy full {{ {split} }}"]
    return ["  policy full {", f"    {split}", "    split experts over ep by all_to_all", "  }",
            "  policy experts_only { split experts over ep }"]


def _header(arch: Arch) -> list[str]:
    att, moe = arch.attention, arch.experts
    kind = f"{arch.family}" + (f", {arch.architecture}" if arch.architecture else "")
    lines = [f"Imported by `infest import-hf` from {_safe(Path(arch.source).name)} ({kind}).",
             _attention_note(att, arch.plan)]
    if moe is not None:
        shared = f" plus a shared expert (ffn {moe.shared_ffn})" if moe.shared_ffn else ""
        lines.append(f"MoE: {moe.experts} routed experts, top-{moe.top_k}, expert ffn "
                     f"{moe.ffn}{shared}.")
    lines.append(f"LM head {'tied to' if arch.tied else 'separate from'} the embedding.")
    if arch.context:
        lines.append(f"Trained context {arch.context} tokens (max_position_embeddings, or "
                     "rope scaling original x factor when larger).")
    lines.append(_formats_note(arch))
    lines += arch.notes
    lines.append("Rope, dropout and scaling factors do not change bytes or FLOPs here.")
    return [f"# {row}" for text in lines for row in textwrap.wrap(text, 86)]


def _formats_note(arch: Arch) -> str:
    f = arch.formats
    if not f.scheme:
        return f"Formats: {f.weights} weights, KV cache and activations."
    present = ["embed", "attention"] + (["mlp"] if arch.ffn else [])
    if arch.experts is not None:
        present += ["router", "experts"] + (["shared_expert"] if arch.experts.shared_ffn else [])
    kept = [r for r in present + ["lm_head"] if r in f.kept]
    tail = f"; {', '.join(kept)} kept unquantized" if kept else ""
    return f"Formats: {f.scheme}{tail}."


def _attention_note(att: Attention, plan: list[Layer]) -> str:
    if att.mla is not None:
        index = att.indexer
        sparse = f"; indexer {index['index_heads']} heads x {index['index_head_dim']}, " \
            f"top-{index['index_topk']} keys" if index else ""
        return (f"Attention: MLA, {att.heads} heads, kv_lora_rank {att.mla['kv_lora_rank']}, "
                f"rope {att.mla['rope_dim']}, nope {att.mla['nope_dim']}, v {att.mla['v_dim']}"
                f"{sparse}.")
    extras = [w for w, on in (("q/k/v biases", att.qkv_bias and not att.o_bias),
                              ("q/k/v/o biases", att.o_bias), ("QK-norm", att.qk_norm),
                              ("a sink logit per head", att.sinks)) if on]
    sliding = sum(layer.sliding for layer in plan)
    if sliding:
        extras.append(f"{sliding} of {len(plan)} layers use a {att.window}-token window")
    tail = "; " + ", ".join(extras) if extras else ""
    return f"Attention: GQA, {att.heads} q heads, {att.kv_heads} kv heads, " \
           f"head_dim {att.head_dim}{tail}."


def _param_lines(arch: Arch) -> list[str]:
    """`name = value` pairs, a line per topic (size, attention, MLP), wrapped if long."""
    lines = []
    for pairs in _params(arch):
        line = ""
        for name, value in pairs:
            item = f"{name} = {value}"
            if line and len(line) + len(item) + 2 > 96:
                lines.append(line)
                line = ""
            line = f"{line}; {item}" if line else f"  {item}"
        lines.append(line)
    return lines


def _params(arch: Arch) -> list[list[tuple[str, str]]]:
    """The model's params by topic; values are formatted ints (or `hidden / heads`)."""
    size = [("hidden", str(arch.hidden)), ("layers", str(arch.layers))]
    if _dense_prefix(arch) is not None:
        size.append(("dense_layers", str(_dense_prefix(arch))))
    mlp = [("ffn", str(arch.ffn))] if arch.ffn is not None else []
    mlp += _expert_params(arch.experts) + [("vocab", str(arch.vocab))]
    if any(layer.sliding for layer in arch.plan):
        mlp.append(("window", str(arch.attention.window)))
    context = [[("trained_context", str(arch.context))]] if arch.context else []
    return context + [size, _attention_params(arch), mlp]


def _attention_params(arch: Arch) -> list[tuple[str, str]]:
    att = arch.attention
    if att.mla is not None:
        extra = att.mla | (att.indexer or {})
        return [("heads", str(att.heads))] + [(k, str(v)) for k, v in extra.items()
                                              if v is not None]
    same = att.head_dim * att.heads == arch.hidden
    return [("heads", str(att.heads)), ("kv_heads", str(att.kv_heads)),
            ("head_dim", "hidden / heads" if same else str(att.head_dim))]


def _expert_params(moe: Experts | None) -> list[tuple[str, str]]:
    if moe is None:
        return []
    pairs = [("experts", str(moe.experts)), ("top_k", str(moe.top_k)),
             ("expert_ffn", str(moe.ffn))]
    return pairs + ([("shared_ffn", str(moe.shared_ffn))] if moe.shared_ffn else [])


def _dtype_line(f: Formats) -> str:
    parts = [f"weights: {f.weights}", f"kv: {f.kv}", f"act: {f.act}"]
    return "  " + "; ".join(parts + ([f"math: {f.math}"] if f.math else []))


def _kw(arch: Arch, role: str) -> str:
    """`, weights=bf16, math=bf16` when a role's formats differ from the model's."""
    over = arch.formats.overrides.get(role, {})
    return "".join(f", {k}={v}" for k, v in over.items())


def _decl(role: str, value: str) -> str:
    """A block's dtype line: `math: fp8`, or `weights: bits = 4.15625` for a bits= format."""
    return f"weights: bits = {value}" if role == "bits" else f"{role}: {value}"


def _op(code: str, depth: int, group: str | None = None, comment: str | None = None,
        suffix: str = "") -> str:
    """One op line: the code, then `group g`, a `{` and/or a `# comment` at the column."""
    parts = [f"group {group}" if group else "", suffix, f"# {comment}" if comment else ""]
    tail = " ".join(p for p in parts if p)
    text = "  " * depth + code
    return f"{text.ljust(_OP_COLUMN - 1)} {tail}" if tail else text


# ---- layer runs ---------------------------------------------------------------------------

def _dense_prefix(arch: Arch) -> int | None:
    """k when the first k layers are dense and the rest MoE (DeepSeek's layout)."""
    runs = _rle(arch.plan)
    if len(runs) == 2 and not runs[0][1].moe and runs[1][1].moe \
            and runs[0][1].sliding == runs[1][1].sliding:
        return runs[0][0]
    return None


def _rle(plan: list[Layer]) -> list[tuple[int, Layer]]:
    runs: list[tuple[int, Layer]] = []
    for layer in plan:
        if runs and runs[-1][1] == layer:
            runs[-1] = (runs[-1][0] + 1, layer)
        else:
            runs.append((1, layer))
    return runs


def _period(plan: list[Layer]) -> int | None:
    """The shortest p (2..8) with plan == plan[:p] repeated, if any."""
    for p in range(2, 9):
        if len(plan) % p == 0 and plan == plan[:p] * (len(plan) // p):
            return p
    return None


def _runs(arch: Arch) -> list[tuple[str, list[Layer]]]:
    """(repeat count text, the layers of one iteration) for each repeat block."""
    runs = _rle(arch.plan)
    if len(runs) == 1:
        return [("layers", [runs[0][1]])]
    if _dense_prefix(arch) is not None:
        return [("dense_layers", [runs[0][1]]), ("layers - dense_layers", [runs[1][1]])]
    period = _period(arch.plan)
    if period is not None:
        return [(f"layers / {period}", arch.plan[:period])]
    return [(str(n), [layer]) for n, layer in runs]


def _repeat(arch: Arch, count: str, kinds: list[Layer]) -> list[str]:
    """A repeat block calling the layer of each kind in one iteration."""
    several = len(kinds) > 1
    calls = [layer_call(_layer_name(arch, k), _call_args(arch, k),
                   _kind_name(k, arch) if several else None) for k in kinds]
    return [_op(f"repeat {count} {{", 1)] + calls + ["  }"]


def _kind_name(kind: Layer, arch: Arch) -> str:
    windowed = "chunked" if arch.family == "llama4_text" else "sliding"
    attn = f"{windowed} ({arch.attention.window})" if kind.sliding else "full"
    return f"{attn}{' MoE' if kind.moe else ''} layer"


# ---- layer definitions --------------------------------------------------------------------

def layer_block(name: str, params: list[str], body: list[str],
                comment: str | None = None) -> list[str]:
    """`layer name(params) { body }`: body lines are op lines at depth 2 (from `_op`)."""
    head = [f"  # {row}" for row in textwrap.wrap(comment, 86)] if comment else []
    return head + [f"  layer {name}({', '.join(params)}) {{"] + body + ["  }", ""]


def layer_call(name: str, args: list[str], comment: str | None = None, depth: int = 2) -> str:
    """`x = name(x, args...)`: one call of a layer inside a repeat."""
    return _op(f"x = {name}({', '.join(['x'] + args)})", depth, comment=comment)


def _shapes(arch: Arch) -> list[bool]:
    """The distinct layer bodies in plan order: a dense and/or an MoE body (the window
    is an argument, so sliding and full layers share a body)."""
    return list(dict.fromkeys(layer.moe for layer in arch.plan))


def _layer_name(arch: Arch, kind: Layer) -> str:
    if len(_shapes(arch)) == 1:
        return "decoder"
    return "moe_decoder" if kind.moe else "dense_decoder"


def _windowed(arch: Arch) -> bool:
    return any(layer.sliding for layer in arch.plan)


def _call_args(arch: Arch, kind: Layer) -> list[str]:
    if not _windowed(arch):
        return []
    return ["window" if kind.sliding else "0"]


def _layer_defs(arch: Arch) -> list[str]:
    """One `layer` definition per distinct body, called from the repeats."""
    params = ["x", "window"] if _windowed(arch) else ["x"]
    comment = "One decoder layer per body" + (
        "; `window = 0` gives full attention, so sliding and full layers share one"
        if _windowed(arch) else "") + "."
    lines: list[str] = []
    for i, moe in enumerate(_shapes(arch)):
        kind = Layer(sliding=_windowed(arch), moe=moe)
        body = _attention_lines(arch, kind) + _mlp_lines(arch, kind)
        lines += layer_block(_layer_name(arch, kind), params, body,
                             None if i else comment)
    return lines


def _attention_lines(arch: Arch, kind: Layer) -> list[str]:
    att = arch.attention
    lines = [_op("h = rmsnorm(x)", 2, group="norm")]
    lines += _mla_lines(arch) if att.mla is not None else _gqa_lines(arch, kind)
    if arch.post_norms:
        return lines + [_op("po = rmsnorm(o)", 2, group="norm",
                            comment="post_attention_layernorm"), _op("x = add(x, po)", 2)]
    return lines + [_op("x = add(x, o)", 2)]


def _gqa_lines(arch: Arch, kind: Layer) -> list[str]:
    att, kw = arch.attention, _kw(arch, "attention")
    qkv = ", bias=1" if att.qkv_bias else ""
    lines = [_op(f"q = linear(h, hidden -> heads * head_dim{qkv}{kw})", 2, group="attention"),
             _op(f"k = linear(h, hidden -> kv_heads * head_dim{qkv}{kw})", 2),
             _op(f"v = linear(h, hidden -> kv_heads * head_dim{qkv}{kw})", 2),
             _op("fuse qkv { q, k, v }", 2, comment="one GEMM, concatenated weights")]
    if att.qk_norm:
        dim, what = ("", "over all heads") if att.qk_norm_whole else \
            (", dim=head_dim", "head_dim weights")
        lines += [_op(f"q = rmsnorm(q{dim})", 2, comment=f"QK-norm: {what}"),
                  _op(f"k = rmsnorm(k{dim})", 2),
                  _op("fuse qk_norm { q, k }", 2, comment="both QK-norms in one kernel")]
    extra = (", window=window" if kind.sliding else "") + (", sinks=1" if att.sinks else "")
    lines.append(_op(f"a = attention(q, k, v, heads, kv_heads, head_dim{extra}"
                     f"{_kw(arch, 'attention_core')})", 2))
    o_bias = ", bias=1" if att.o_bias else ""
    return lines + [_op(f"o = linear(a, heads * head_dim -> hidden{o_bias}{kw})", 2)]


_LATENT = _op("c = linear(h, hidden -> kv_lora_rank + rope_dim{kw})", 2, group="latent",
              comment="latent + shared rope key")
_LATENT_NORM = _op("c = rmsnorm(c, dim=kv_lora_rank)", 2, comment="kv_a_layernorm (latent part)")


def _mla_lines(arch: Arch) -> list[str]:
    kw = _kw(arch, "attention")
    q_out = "heads * (nope_dim + rope_dim)"
    if arch.attention.mla and arch.attention.mla["q_lora_rank"] is not None:
        # The latent down-projections stay whole under tensor parallel, as in engines.
        # Engines run both down-projections as one GEMM and both latent norms as one kernel.
        lines = [_op(f"cq = linear(h, hidden -> q_lora_rank{kw})", 2, group="latent"),
                 _LATENT,
                 _op("fuse fuse_a { cq, c }", 2, comment="one GEMM: q_a and kv_a concatenated"),
                 _op("cq = rmsnorm(cq)", 2, comment="q_a_layernorm"),
                 _LATENT_NORM,
                 _op("fuse latent_norms { cq, c }", 2, comment="both latent RMSNorms in one kernel"),
                 _op(f"q = linear(cq, q_lora_rank -> {q_out}{kw})", 2, group="attention")]
    else:
        lines = [_op(f"q = linear(h, hidden -> {q_out}{kw})", 2, group="attention"),
                 _LATENT, _LATENT_NORM]
    sparse = ", index_topk=index_topk" if arch.attention.indexer else ""
    return [line.replace("{kw}", kw) for line in lines] + _indexer_lines(arch) + [
        _op(f"a = mla(q, c, heads, kv_lora_rank, rope_dim, nope_dim, v_dim{sparse}"
            f"{_kw(arch, 'attention_core')})", 2, group="attention"),
        _op(f"o = linear(a, heads * v_dim -> hidden{kw})", 2)]


def _indexer_lines(arch: Arch) -> list[str]:
    """DeepSeek-V3.2's lightning indexer (inference/model.py `Indexer`): q from the normed
    q latent (wq_b), one key from h (wk, then a LayerNorm k_norm), a weight per head
    (weights_proj); its key cache is fp8, as in DeepSeek's code."""
    if arch.attention.indexer is None:
        return []
    kw = _kw(arch, "attention")
    src = "cq, q_lora_rank" if arch.attention.mla and arch.attention.mla["q_lora_rank"] \
        else "h, hidden"
    return [_op(f"iq = linear({src} -> index_heads * index_head_dim{kw})", 2, group="indexer",
                comment="lightning indexer"),
            _op(f"ik = linear(h, hidden -> index_head_dim{kw})", 2),
            _op("kn = layernorm(ik)", 2, comment="k_norm"),
            _op(f"iw = linear(h, hidden -> index_heads{kw})", 2, comment="weights_proj"),
            _op("sel = indexer(iq, kn, index_heads, index_head_dim, index_topk, kv=fp8)", 2,
                comment="scores every cached token, keeps index_topk")]


def _mlp_lines(arch: Arch, kind: Layer) -> list[str]:
    post = "po, " if arch.post_norms else ""
    lines = [_op("h = rmsnorm(x)", 2, group="norm"),
             _op(f"fuse add_norm {{ {post}x, h }}", 2,
                 comment=f"{'norm + ' if post else ''}residual add + RMSNorm, one kernel")]
    if not kind.moe:
        bias = ", bias=1" if arch.mlp_bias else ""
        lines += _glu_lines(arch, "ffn", bias + _kw(arch, "mlp"), 2, "mlp")
        if arch.post_norms:
            return lines + _post_mlp_lines(arch)
        return lines + [_op("x = add(x, d)", 2)] + _glu_fusions(arch, "gate_up", "down_add", "d")
    return lines + _moe_lines(arch)


def _post_mlp_lines(arch: Arch) -> list[str]:
    """Gemma's post_feedforward_layernorm before the residual add, fused with it."""
    return [_op("pd = rmsnorm(d)", 2, group="norm", comment="post_feedforward_layernorm"),
            _op("x = add(x, pd)", 2),
            _glu_fusions(arch, "gate_up", "", "d")[0],
            _op("fuse post_norm_add { pd, x }", 2, comment="RMSNorm + residual add, one kernel")]


def _glu_fusions(arch: Arch, up: str, down: str, d: str, prefix: str = "",
                 combine: str = "") -> list[str]:
    """`fuse` lines for a gated MLP: gate+up GEMM with its activation, then the down
    GEMM with the residual add (and a moe block's combine) in its epilogue."""
    g, u = f"{prefix}g", f"{prefix}u"
    return [_op(f"fuse {up} {{ {g}, {u}, {d}.{arch.glu} }}", 2,
                comment="gate+up GEMM with the activation in its epilogue"),
            _op(f"fuse {down} {{ {d},{combine} x }}", 2,
                comment="residual add in the GEMM epilogue")]


def _glu_lines(arch: Arch, width: str, kw: str, depth: int, group: str | None,
               prefix: str = "", comment: str | None = None) -> list[str]:
    g, u, d = f"{prefix}g", f"{prefix}u", f"{prefix}d"
    return [_op(f"{g} = linear(h, hidden -> {width}{kw})", depth, group=group, comment=comment),
            _op(f"{u} = linear(h, hidden -> {width}{kw})", depth),
            _op(f"{d} = linear({arch.glu}({g}, {u}), {width} -> hidden{kw})", depth)]


def _moe_lines(arch: Arch) -> list[str]:
    moe = arch.experts
    assert moe is not None
    router = "r = router(h, hidden -> experts" + (", bias=1" if moe.router_bias else "")
    lines = [_op(router + _kw(arch, "router") + ")", 2, group="router"),
             _op("m = moe(h, experts=experts, top_k=top_k)", 2, group="experts", suffix="{")]
    lines += [_op(_decl(k, v), 3) for k, v in arch.formats.overrides.get("experts", {}).items()]
    bias = ", bias=1" if moe.bias else ""
    lines += _glu_lines(arch, "expert_ffn", bias, 3, None, comment="one expert's gated MLP")
    lines += ["    }", _op("x = add(x, m)", 2)]
    lines += _glu_fusions(arch, "experts_up", "experts_down", "d", combine=" m,")
    if moe.shared_ffn:
        lines += _glu_lines(arch, "shared_ffn", _kw(arch, "shared_expert"), 2,
                            "shared_expert", prefix="s", comment="every token: always read")
        lines.append(_op("x = add(x, sd)", 2))
        lines += _glu_fusions(arch, "shared_up", "shared_add", "sd", prefix="s")
    return lines


# ---- entry point ---------------------------------------------------------------------------

def sibling_quant_config(config_path: Path) -> Path | None:
    """A ModelOpt quant config beside a config: `hf_quant_config.json` next to
    `config.json`, else `<name>.hf_quant_config.json` or `<name>_hf_quant_config.json` for
    `<name>.config.json`, `<name>_config.json` or `<name>.json`."""
    name = config_path.name
    if name == "config.json":
        return _first_file([config_path.with_name("hf_quant_config.json")])
    stem = next((name[: -len(s)] for s in (".config.json", "_config.json", "-config.json",
                                            ".json") if name.endswith(s)), name)
    return _first_file([config_path.with_name(f"{stem}{sep}hf_quant_config.json")
                        for sep in (".", "_", "-")])


def _first_file(candidates: list[Path]) -> Path | None:
    return next((c for c in candidates if c.is_file()), None)


def import_hf(config_path: Path, quant_path: Path | None = None,
              name: str | None = None, gguf: str | None = None) -> str:
    """The .arch text for a config.json (and an optional hf_quant_config.json, or a GGUF
    type such as Q4_K_M for the weights)."""
    data = load_json(config_path)
    quant = (load_json(quant_path), str(quant_path)) if quant_path is not None else None
    if data.get("model_type") in HYBRID_FAMILIES:
        from infest.compiler.hf_hybrid import read_hybrid, render_hybrid
        return render_hybrid(read_hybrid(data, str(config_path), quant, name, gguf))
    if data.get("model_type") in VL_FAMILIES:
        from infest.compiler.hf_hybrid import read_vl
        return render(read_vl(data, str(config_path), quant, name, gguf))
    arch = read_arch(data, str(config_path), quant, name, gguf)
    return render(arch)
