"""Write a readable .arch spec from a Hugging Face `config.json` (`infest import-hf`).

Three stages, one module each: compiler/hf/config.py reads the JSON under explicit limits
into typed, named accessors (nothing from the file is ever evaluated); this module turns a
family's fields into an `Arch` (dimensions, attention, experts, a per-layer plan and the
number formats); compiler/hf/render.py lays the Arch out like the shipped specs, one
`layer` per distinct decoder body and `repeat` blocks calling them. Hybrid recurrent
families and vision-language wrappers go through compiler/hf/hybrid.py.

Families: llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text (dense); mixtral,
qwen3_moe, gpt_oss, minimax_m2 (MoE); glm4_moe (dense first layers, MoE with a shared
expert); llama4 (text_config: chunked attention, dense / MoE layers with a shared expert);
deepseek_v3, deepseek_v32 (plus the lightning indexer) and kimi_k2 (MLA + MoE with a
shared expert). Quantization (compiler/hf/quant.py) is read from `quantization_config`, a
ModelOpt `hf_quant_config.json` beside the config, or a GGUF type; one that is not
understood is an error, never a silent bf16.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from infest.compiler.hf.config import Config, text_model, trained_context
from infest.compiler.hf.defaults import defaults_note, with_defaults
from infest.compiler.hf.layouts import layout, layout_notes
from infest.compiler.hf.quant import formats
from infest.compiler.hf.render import Arch, Attention, Experts, Layer, safe_text
from infest.compiler.hf.vision import tower
from infest.dsl.errors import fail

FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3",
            "deepseek_v32", "kimi_k2", "gpt_oss", "phi3", "glm4_moe", "minimax_m2", "gemma2",
            "gemma3_text", "gemma3", "llama4", "llama4_text", "falcon", "phi", "starcoder2",
            "cohere", "olmo2", "olmo3", "exaone4", "internlm2", "mimo", "deepseek_v2",
            "glm_moe_dsa")
# Hybrid recurrent/attention families, read and rendered by compiler/hf/hybrid.py.
HYBRID_FAMILIES = ("qwen3_next", "qwen3_5", "qwen3_5_moe", "nemotron_h")
# Vision-language wrappers (and renamed releases) whose language model
# compiler/hf/hybrid.py imports as a family above (its VL_TEXT).
VL_FAMILIES = ("qwen3_vl", "qwen3_vl_moe", "kimi_k25", "mistral3", "qwen2_5_vl", "ministral3")
_MOE_FAMILIES = {"mixtral", "qwen3_moe", "deepseek_v3", "deepseek_v32", "kimi_k2", "gpt_oss",
                 "glm4_moe", "minimax_m2", "llama4_text", "deepseek_v2", "glm_moe_dsa"}
# MLA attention, DeepSeek's MoE layout (glm_moe_dsa: GLM-5, DeepSeek-V3.2's attention).
_MLA_FAMILIES = {"deepseek_v3", "deepseek_v32", "kimi_k2", "deepseek_v2", "glm_moe_dsa"}
# Families read as another's fields (MiMo: Qwen2's decoder plus MTP layers).
_READ_AS = {"mimo": "qwen2"}
# Where a family keeps its multi-token-prediction layer count.
MTP_KEYS = ("num_nextn_predict_layers", "num_mtp_modules")
# Gemma: a norm after attention and after the MLP too, tied embeddings by default.
_GEMMA_FAMILIES = {"gemma2", "gemma3_text"}
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_GLU = {"silu": "silu_mul", "swish": "silu_mul", "gelu": "gelu_mul",
        "gelu_pytorch_tanh": "gelu_mul", "gelu_new": "gelu_mul"}

MAX_LAYERS = 10_000          # num_hidden_layers: the per-layer plan is built in memory


# ---- config -> Arch -------------------------------------------------------------------

def read_arch(data: Mapping[str, Any], source: str = "config.json",
              quant: tuple[Mapping[str, Any], str] | None = None, name: str | None = None,
              gguf: str | None = None, defaults_family: str | None = None) -> Arch:
    """Check a config (and an optional hf_quant_config, as (data, path), or a GGUF type)
    and build its Arch. Fields it omits take the defaults of `defaults_family` (its own
    model_type unless given; compiler/hf/defaults.py), named in the header."""
    data, vision = _text_config(data, source)
    family = _family(Config(data, source))
    data, taken = with_defaults(data, defaults_family or family)
    cfg = Config(data, source)
    family = _READ_AS.get(family, family)
    _check_unmodelled(cfg, family)
    shape = layout(cfg, family)
    hidden, layers = cfg.int("hidden_size"), cfg.int("num_hidden_layers")
    if layers > MAX_LAYERS:
        raise fail(None, f"{source}: config field 'num_hidden_layers' is {layers}, more than "
                   f"MAX_LAYERS = {MAX_LAYERS}")
    plan = _plan(cfg, family, layers)
    experts = _experts(cfg, family) if any(layer.moe for layer in plan) else None
    needs_ffn = any(not layer.moe for layer in plan)
    title = title_of(data, source)
    att = _attention(cfg, family, hidden)
    att = replace(att, **{k: shape.pop(k) for k in _ATT_FIELDS if k in shape})
    ffn = shape.pop("ffn", None) or (cfg.int(_FFN_KEY.get(family, "intermediate_size"))
                                     if needs_ffn else None)
    fields = {"glu": _glu(cfg, family), "mlp_bias": cfg.flag("mlp_bias")} | shape
    return Arch(name=identifier(name or title or family), title=title or family, source=source,
                family=family, architecture=_architecture(data), hidden=hidden,
                layers=layers, vocab=cfg.int("vocab_size"), ffn=ffn,
                tied=cfg.flag("tie_word_embeddings"), attention=att, experts=experts,
                plan=plan, formats=formats(data, source, base_dtype(cfg), layers, quant, gguf),
                context=trained_context(cfg), post_norms=family in _GEMMA_FAMILIES,
                notes=_family_notes(cfg, family) + layout_notes(family)
                + defaults_note(defaults_family or family, taken) + vision[1],
                mtp_layers=mtp_layers(cfg), vision=vision[0], **fields)


# Layout fields (compiler/hf/layouts.py) that belong to the attention.
_ATT_FIELDS = ("kv_heads", "qkv_bias", "o_bias", "qk_norm", "qk_norm_whole")


def mtp_layers(cfg: Config) -> int:
    """The multi-token-prediction layers a checkpoint carries (0: none)."""
    return max(cfg.count(key) for key in MTP_KEYS)


# The dense MLP's width where a family keeps intermediate_size for its experts.
_FFN_KEY = {"llama4_text": "intermediate_size_mlp"}
# Fields of a multimodal wrapper (`llama4`) that apply to its text model.
# Multimodal wrappers read here: model_type -> the family of their text_config.
_WRAPPERS = {"llama4": "llama4_text", "gemma3": "gemma3_text"}


def _text_config(data: Mapping[str, Any], source: str
                 ) -> tuple[Mapping[str, Any], tuple[tuple[int, str] | None, tuple[str, ...]]]:
    """A multimodal wrapper's text model (hf_config.text_model) and its vision tower
    (params and what they are, held in memory; compiler/hf/vision.py); any other config
    as is, with no tower."""
    wrapper = data.get("model_type")
    if wrapper not in _WRAPPERS:
        return data, (None, ())
    text = text_model(data, source, _WRAPPERS[wrapper])
    return text, tower(wrapper, data.get("vision_config"), text, source)


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
    return ", ".join(safe_text(a) for a in archs) if ok else ""



def title_of(data: Mapping[str, Any], source: str) -> str:
    """A display name: the file stem (`org--Model.config.json` -> Model)."""
    stem = Path(source).name
    for suffix in (".json", ".config"):
        stem = stem[: -len(suffix)] if stem.endswith(suffix) else stem
    stem = stem.split("--")[-1]
    return "" if stem in ("config", "") else safe_text(stem)


def identifier(text: str) -> str:
    """A model name the language accepts: lower case, [a-z0-9_], not starting with a digit."""
    name = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "imported"
    return f"m_{name}" if name[0].isdigit() else name


def _glu(cfg: Config, family: str) -> str:
    # Gemma's modelling code reads hidden_activation (gemma3 configs have only that one).
    key = "hidden_activation" if family in _GEMMA_FAMILIES and \
        cfg.data.get("hidden_activation") is not None else "hidden_act"
    if family in ("falcon", "phi", "starcoder2"):  # not gated: compiler/hf/layouts.py
        return "silu_mul"
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
    return notes


def _attention(cfg: Config, family: str, hidden: int) -> Attention:
    heads = cfg.int("num_attention_heads")
    if family in _MLA_FAMILIES:
        return _mla(cfg, heads)
    head_dim = cfg.int("head_dim", hidden // heads)
    if hidden % heads and cfg.opt_int("head_dim") is None:
        raise fail(None, f"{cfg.source}: missing required config field 'head_dim'",
                   f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
    bias = cfg.flag("attention_bias")  # (falcon, phi, starcoder2: compiler/hf/layouts.py)
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

def base_dtype(cfg: Config) -> str:
    name = cfg.str("torch_dtype", "bfloat16")
    if name not in _TORCH_DTYPES:
        raise fail(None, f"{cfg.source}: config field 'torch_dtype' is '{name}'",
                   f"known: {', '.join(_TORCH_DTYPES)}")
    return _TORCH_DTYPES[name]
