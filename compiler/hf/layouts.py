"""Decoder layouts beyond the Llama shape for `infest import-hf`: where the norms sit,
whether attention and the MLP run side by side, LayerNorm or RMSNorm, a gated MLP or not.

Each family's reader returns the `Arch` fields it changes (compiler/hf/render.py lays
them out); a field the layout cannot model is an error naming it, never a silent drop.
Sources: the families' modeling files in transformers 4.57.1 (modeling_<family>.py).
"""
from __future__ import annotations

from typing import Any, Callable

from infest.compiler.hf.config import Config
from infest.dsl.errors import fail

# Activations of an MLP that is not gated (up, activation, down): the op that runs it.
PLAIN = {"gelu": "gelu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu",
         "relu": "relu", "silu": "silu"}


def _refuse_flag(cfg: Config, key: str, hint: str) -> None:
    if cfg.flag(key):
        raise fail(None, f"{cfg.source}: config field '{key}' is true", hint)


def _plain_act(cfg: Config, key: str) -> str:
    act = cfg.str(key)
    if act not in PLAIN:
        raise fail(None, f"{cfg.source}: config field '{key}' is '{act}'",
                   f"import-hf knows MLPs with: {', '.join(PLAIN)}")
    return PLAIN[act]


def _falcon(cfg: Config) -> dict[str, Any]:
    """Falcon: attention and MLP side by side from one LayerNorm (7B) or two (the new
    decoder architecture, 40B/180B); multi-query (one KV head) unless the new
    architecture gives num_kv_heads; an ungated 4 x hidden GELU MLP; `bias` on every
    linear."""
    _refuse_flag(cfg, "alibi", "import-hf models Falcon with rotary positions")
    heads, new = cfg.int("num_attention_heads"), cfg.flag("new_decoder_architecture")
    kv = cfg.int("num_kv_heads", heads) if new else 1 if cfg.flag("multi_query", True) else heads
    parallel = (cfg.int("num_ln_in_parallel_attn", 2) if new else 1) \
        if cfg.flag("parallel_attn", True) else 0
    bias = cfg.flag("bias")
    return {"norm": "layernorm", "parallel": parallel, "gated": False,
            "glu": _plain_act(cfg, "activation"), "mlp_bias": bias, "kv_heads": kv,
            "qkv_bias": bias, "o_bias": bias,
            "ffn": cfg.int("ffn_hidden_size", 4 * cfg.int("hidden_size"))}


def _phi(cfg: Config) -> dict[str, Any]:
    """Phi-1/1.5/2: one LayerNorm feeding attention and an ungated MLP side by side,
    biases on every linear and on the LM head."""
    _refuse_flag(cfg, "qk_layernorm", "import-hf models Phi without q/k LayerNorms")
    return {"norm": "layernorm", "parallel": 1, "gated": False, "glu": _plain_act(cfg, "hidden_act"),
            "mlp_bias": True, "qkv_bias": True, "o_bias": True, "head_bias": True}


def _starcoder2(cfg: Config) -> dict[str, Any]:
    """StarCoder2: pre-LayerNorm layers, an ungated MLP, `use_bias` on every linear."""
    bias = cfg.flag("use_bias", True)
    return {"norm": "layernorm", "gated": False, "glu": _plain_act(cfg, "hidden_act"),
            "mlp_bias": bias, "qkv_bias": bias, "o_bias": bias}


def _cohere(cfg: Config) -> dict[str, Any]:
    """Command-R / Aya: one norm feeding attention and a gated MLP side by side."""
    _refuse_flag(cfg, "use_qk_norm", "import-hf models Cohere without QK-norm")
    return {"parallel": 1}


def _post_norm(cfg: Config) -> dict[str, Any]:
    """OLMo 2/3 (QK-norm over all heads) and EXAONE 4 (per head): no norm before a
    sublayer, an RMSNorm on its output before the residual add."""
    whole = cfg.data.get("model_type") in ("olmo2", "olmo3")
    return {"post_only": True, "qk_norm": True, "qk_norm_whole": whole}


def _internlm2(cfg: Config) -> dict[str, Any]:
    """InternLM2: Llama's layer (wqkv fused, w1/w3/w2); `bias` on wqkv and wo."""
    bias = cfg.flag("bias")
    return {"qkv_bias": bias, "o_bias": bias}


LAYOUTS: dict[str, Callable[[Config], dict[str, Any]]] = {
    "falcon": _falcon, "phi": _phi, "starcoder2": _starcoder2, "cohere": _cohere,
    "olmo2": _post_norm, "olmo3": _post_norm, "exaone4": _post_norm, "internlm2": _internlm2}


def layout(cfg: Config, family: str) -> dict[str, Any]:
    """The layout fields of a family (empty: the Llama shape)."""
    reader = LAYOUTS.get(family)
    return reader(cfg) if reader else {}


def layout_notes(family: str) -> tuple[str, ...]:
    """Header lines on what a layout approximates."""
    notes = {
        "cohere": "Cohere's LayerNorm has no bias: written as an RMSNorm (the same hidden "
                  "weights; its mean subtraction, about 3 FLOPs an element, not counted).",
        "falcon": "Falcon fuses q, k and v into query_key_value: the same params as "
                  "separate projections.",
        "phi": "Phi: rotary on part of each head (partial_rotary_factor): no cost change.",
    }
    return (notes[family],) if family in notes else ()
