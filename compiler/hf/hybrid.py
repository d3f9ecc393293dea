"""Hybrid families for `infest import-hf`: recurrent-state mixers beside attention.

qwen3_next (Qwen3-Next): Gated DeltaNet layers and gated full-attention layers in the
order `layer_types` (or `full_attention_interval`) gives, every MLP a sparse MoE with a
sigmoid-gated shared expert. nemotron_h (Nemotron-H, Nemotron Nano 2): one mixer a block
(Mamba-2, attention or a squared-ReLU MLP), in the order `hybrid_override_pattern` spells.

A config becomes a `Hybrid`: params, one `layer` definition per kind of block and the
sequence of layer calls; `render_hybrid` writes the definitions once and the calls as
`repeat` blocks over their runs. Config text reaches the spec only through checked
integers and `safe_text` comments (compiler/hf/families.py), never as spec text.
"""
from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from infest.compiler.hf.config import Config, text_model, trained_context
from infest.compiler.hf.families import MAX_LAYERS, base_dtype, identifier, read_arch, title_of
from infest.compiler.hf.render import Arch, op_line, safe_text, vision_line
from infest.compiler.hf.quant import Formats, formats
from infest.compiler.hf.vision import TOWERS, tower
from infest.dsl.errors import SpecError, fail

MAX_UNIT = 12  # longest run of layer calls `repeat` compression looks for (Nemotron-H: 11)

Token = tuple[str, ...]  # the layer calls of one decoder block, e.g. ("deltanet", "sparse_moe")


@dataclass
class Hybrid:
    """What `render_hybrid` lays out: everything read and checked from a config."""

    name: str
    title: str
    source: str
    family: str
    architecture: str
    params: list[list[tuple[str, str]]]      # `name = value` pairs, a line per topic
    formats: Formats
    tied: bool
    layers: dict[str, list[str]]             # layer name -> its body lines
    plan: list[Token]                        # per decoder block, its layer calls
    policy: list[str]                        # policy lines
    notes: list[str] = field(default_factory=list)
    context: int | None = None
    vision: int | None = None                # a counted vision tower's params: held


# ---- shared reading -------------------------------------------------------------------------

def _fail(cfg: Config, key: str, what: str, hint: str | None = None) -> SpecError:
    return fail(None, f"{cfg.source}: config field '{key}' {what}", hint)


def _check_equal(cfg: Config, key: str, allowed: tuple[Any, ...], hint: str) -> None:
    """A field whose other values change the cost in ways import-hf does not model."""
    value = cfg.data.get(key)
    if value not in allowed:
        raise _fail(cfg, key, f"is {json.dumps(value)}", hint)


def _layer_count(cfg: Config) -> int:
    layers = cfg.int("num_hidden_layers")
    if layers > MAX_LAYERS:
        raise _fail(cfg, "num_hidden_layers", f"is {layers}, more than MAX_LAYERS = {MAX_LAYERS}")
    return layers


def _formats(cfg: Config, layers: int, quant: tuple[Mapping[str, Any], str] | None,
             gguf: str | None) -> Formats:
    """Plain number formats; a quantized hybrid checkpoint is an error, never a silent bf16."""
    f = formats(cfg.data, cfg.source, base_dtype(cfg), layers, quant, gguf)
    if f.scheme:
        raise fail(None, f"{cfg.source}: quantization ({f.scheme}) of a {cfg.data['model_type']} "
                   "checkpoint is not mapped onto its layers yet",
                   "import the unquantized config and set the formats in the spec")
    return f


def _head_dim(cfg: Config, hidden: int, heads: int, keys: tuple[str, ...] = ("head_dim",)) -> int:
    for key in keys:
        if cfg.opt_int(key) is not None:
            return cfg.int(key)
    if hidden % heads:
        raise fail(None, f"{cfg.source}: missing required config field '{keys[0]}'",
                   f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
    return hidden // heads


# ---- qwen3_next -------------------------------------------------------------------------------

def _qwen3_next_checks(cfg: Config) -> None:
    """Qwen3-Next fields import-hf does not model: an error naming each."""
    if cfg.int_list("mlp_only_layers"):
        raise _fail(cfg, "mlp_only_layers", "lists dense layers",
                    "import-hf models Qwen3-Next with a sparse MoE in every layer")
    if cfg.int("decoder_sparse_step", 1) != 1:
        raise _fail(cfg, "decoder_sparse_step", "is not 1",
                    "import-hf models Qwen3-Next with a sparse MoE in every layer")
    _check_equal(cfg, "hidden_act", (None, "silu"), "Qwen3-Next's experts are SwiGLU (silu)")
    _check_equal(cfg, "attention_bias", (None, False), "import-hf models no attention biases")
    _check_equal(cfg, "use_sliding_window", (None, False), "import-hf models full attention")


def _qwen3_next_plan(cfg: Config, layers: int) -> list[str]:
    """Per layer its mixer: `layer_types`, else every `full_attention_interval`-th is full."""
    types = cfg.data.get("layer_types")
    if types is None:
        step = cfg.int("full_attention_interval", 4)
        types = ["full_attention" if (i + 1) % step == 0 else "linear_attention"
                 for i in range(layers)]
    known = {"linear_attention": "deltanet", "full_attention": "gated_attention"}
    if not isinstance(types, list) or len(types) != layers:
        raise _fail(cfg, "layer_types", f"must list num_hidden_layers ({layers}) entries")
    for i, kind in enumerate(types):
        if kind not in known:
            raise _fail(cfg, f"layer_types[{i}]", f"is {json.dumps(kind)}",
                        f"known layer types: {', '.join(known)}")
    return [known[kind] for kind in types]


def _qwen3_next_params(cfg: Config, hidden: int, dense: bool) -> list[list[tuple[str, str]]]:
    heads = cfg.int("num_attention_heads")
    mlp = [("ffn", str(cfg.int("intermediate_size")))] if dense else [
        ("experts", str(cfg.int("num_experts"))), ("top_k", str(cfg.int("num_experts_per_tok"))),
        ("expert_ffn", str(cfg.int("moe_intermediate_size"))),
        ("shared_ffn", str(cfg.int("shared_expert_intermediate_size")))]
    return [
        [("hidden", str(hidden)), ("layers", str(cfg.int("num_hidden_layers"))),
         ("vocab", str(cfg.int("vocab_size")))],
        [("heads", str(heads)), ("kv_heads", str(cfg.int("num_key_value_heads", heads))),
         ("head_dim", str(_head_dim(cfg, hidden, heads)))],
        [("key_heads", str(cfg.int("linear_num_key_heads"))),
         ("value_heads", str(cfg.int("linear_num_value_heads"))),
         ("key_dim", str(cfg.int("linear_key_head_dim"))),
         ("value_dim", str(cfg.int("linear_value_head_dim"))),
         ("conv_kernel", str(cfg.int("linear_conv_kernel_dim")))], mlp]


DELTANET = [
    ("h = rmsnorm(x)", "norm", None),
    ("q = linear(h, hidden -> key_heads * key_dim)", "attention",
     "q, k, v and the output gate z (Qwen3-Next: in_proj_qkvz)"),
    ("k = linear(h, hidden -> key_heads * key_dim)", None, None),
    ("v = linear(h, hidden -> value_heads * value_dim)", None, None),
    ("z = linear(h, hidden -> value_heads * value_dim)", None, None),
    ("b = linear(h, hidden -> value_heads)", None, "beta and the decay gate, per head"),
    ("a = linear(h, hidden -> value_heads)", None, None),
    ("fuse in_proj { q, k, v, z, b, a }", None, "one GEMM, concatenated weights"),
    ("qc = conv1d(q, conv_kernel)", None, "short causal conv over q, k and v"),
    ("kc = conv1d(k, conv_kernel)", None, None),
    ("vc = conv1d(v, conv_kernel)", None, None),
    ("fuse conv { qc, kc, vc }", None, "one causal_conv1d kernel"),
    ("beta = sigmoid(b)", None, None),
    ("ad = custom(a, params=2 * value_heads)", None,
     "A_log and dt_bias: stored, their few FLOPs not costed"),
    ("s = linear_attention(qc, kc, vc, value_heads, key_heads, key_dim, value_dim, delta=1, "
     "kv=fp32)", None, "state in fp32, as vLLM keeps it"),
    ("n = rmsnorm(s, dim=value_dim)", None, "gated RMSNorm: one value_dim weight vector"),
    ("y = silu_mul(z, n)", None, None),
    ("o = linear(y, value_heads * value_dim -> hidden)", None, None),
    ("x = add(x, o)", None, None),
]

GATED_ATTENTION = [
    ("h = rmsnorm(x)", "norm", None),
    ("q = linear(h, hidden -> heads * head_dim)", "attention",
     "q_proj is twice as wide: queries and the output gate"),
    ("gt = linear(h, hidden -> heads * head_dim)", None, None),
    ("k = linear(h, hidden -> kv_heads * head_dim)", None, None),
    ("v = linear(h, hidden -> kv_heads * head_dim)", None, None),
    ("fuse qkv { q, gt, k, v }", None, "one GEMM, concatenated weights"),
    ("q = rmsnorm(q, dim=head_dim)", None, "QK-norm: head_dim weights"),
    ("k = rmsnorm(k, dim=head_dim)", None, None),
    ("fuse qk_norm { q, k }", None, "both QK-norms in one kernel"),
    ("a = attention(q, k, v, heads, kv_heads, head_dim)", None, None),
    ("y = mul(a, sigmoid(gt))", None, "sigmoid output gate"),
    ("o = linear(y, heads * head_dim -> hidden)", None, None),
    ("x = add(x, o)", None, None),
]

SPARSE_MOE = [
    ("h = rmsnorm(x)", "norm", None),
    ("r = router(h, hidden -> experts)", "router", None),
    ("sw = linear(h, hidden -> 1)", None,
     "shared_expert_gate: sigmoid(h w) scales the shared expert (one multiply an element)"),
    ("m = moe(h, experts=experts, top_k=top_k)", "experts", "{"),
    ("  g = linear(h, hidden -> expert_ffn)", None, "one expert's SwiGLU"),
    ("  u = linear(h, hidden -> expert_ffn)", None, None),
    ("  d = linear(silu_mul(g, u), expert_ffn -> hidden)", None, None),
    ("}", None, None),
    ("x = add(x, m)", None, None),
    ("sg = linear(h, hidden -> shared_ffn)", "shared_expert", "every token: always read"),
    ("su = linear(h, hidden -> shared_ffn)", None, None),
    ("sd = linear(silu_mul(sg, su), shared_ffn -> hidden)", None, None),
    ("x = add(x, sd)", None, None),
]


SWIGLU_MLP = [
    ("h = rmsnorm(x)", "norm", None),
    ("g = linear(h, hidden -> ffn)", "mlp", None),
    ("u = linear(h, hidden -> ffn)", None, None),
    ("d = linear(silu_mul(g, u), ffn -> hidden)", None, None),
    ("x = add(x, d)", None, None),
]


def _read_qwen3_next(cfg: Config) -> dict[str, Any]:
    """Qwen3-Next, and Qwen3.5 (qwen3_5: dense SwiGLU MLPs; qwen3_5_moe: Qwen3-Next's MoE),
    whose text model is the same hybrid with the q/k/v/z and b/a projections unfused."""
    _qwen3_next_checks(cfg)
    _check_equal(cfg, "attn_output_gate", (None, True), "import-hf models gated attention")
    layers, hidden = _layer_count(cfg), cfg.int("hidden_size")
    dense = cfg.data["model_type"] == "qwen3_5"
    mlp = ("swiglu_mlp", SWIGLU_MLP) if dense else ("sparse_moe", SPARSE_MOE)
    params = _qwen3_next_params(cfg, hidden, dense)
    plan = [(mixer, mlp[0]) for mixer in _qwen3_next_plan(cfg, layers)]
    split = "attention, mlp" if dense else "attention, shared_expert"
    policy = [f"  policy full {{ split embedding, {split}, lm_head over tp }}"] if dense else [
        "  policy full {", f"    split embedding, {split}, lm_head over tp",
        "    split experts over ep by all_to_all", "  }",
        "  policy experts_only { split experts over ep }"]
    return {"params": params, "plan": plan, "policy": policy, "layer_count": layers,
            "layers": {"deltanet": DELTANET, "gated_attention": GATED_ATTENTION, mlp[0]: mlp[1]},
            "notes": _qwen3_next_notes(dense)}


def _qwen3_next_notes(dense: bool) -> list[str]:
    mlp = ("Every MLP is a dense SwiGLU." if dense else
           "Every MLP is a sparse MoE with a shared expert behind a sigmoid gate.")
    return ["Gated DeltaNet layers: the q, k, v, z and b, a projections as one GEMM, a short "
            "causal conv over q, k and v, the delta-rule recurrence with a fixed state per "
            "sequence, a gated RMSNorm and out_proj. Full-attention layers: gated attention "
            "(q_proj twice as wide, the second half a sigmoid output gate), QK-norm, GQA.",
            mlp, "The multi-token-prediction layer these checkpoints carry (mtp.*) is a "
            "speculative-decoding draft: not modelled."]


# ---- nemotron_h ------------------------------------------------------------------------------

_BLOCKS = {"M": "mamba2", "*": "self_attention", "-": "relu2_mlp"}


def _nemotron_checks(cfg: Config) -> None:
    """Nemotron-H fields import-hf does not model: an error naming each."""
    _check_equal(cfg, "mamba_hidden_act", (None, "silu"), "Mamba-2's gate is silu")
    _check_equal(cfg, "mlp_hidden_act", (None, "relu2"),
                 "import-hf models Nemotron-H's squared-ReLU MLP (relu2)")
    _check_equal(cfg, "sliding_window", (None,), "import-hf models full attention")


def _nemotron_plan(cfg: Config, layers: int) -> list[Token]:
    pattern = cfg.str("hybrid_override_pattern")
    if len(pattern) != layers:
        raise _fail(cfg, "hybrid_override_pattern", f"has {len(pattern)} blocks",
                    f"num_hidden_layers is {layers}")
    for i, char in enumerate(pattern):
        if char not in _BLOCKS:
            hint = "MoE blocks (E) are not modelled yet" if char == "E" else None
            raise _fail(cfg, "hybrid_override_pattern", f"has {json.dumps(char)} at block {i}",
                        hint or f"known blocks: {', '.join(_BLOCKS)} (Mamba-2, attention, MLP)")
    return [(_BLOCKS[char],) for char in pattern]


def _nemotron_params(cfg: Config, hidden: int) -> list[list[tuple[str, str]]]:
    heads = cfg.int("num_attention_heads")
    head_dim = _head_dim(cfg, hidden, heads, ("head_dim", "attention_head_dim"))
    return [
        [("hidden", str(hidden)), ("layers", str(cfg.int("num_hidden_layers"))),
         ("vocab", str(cfg.int("vocab_size"))), ("ffn", str(cfg.int("intermediate_size")))],
        [("heads", str(heads)), ("kv_heads", str(cfg.int("num_key_value_heads", heads))),
         ("head_dim", str(head_dim))],
        [("mamba_heads", str(cfg.int("mamba_num_heads"))),
         ("mamba_head_dim", str(cfg.int("mamba_head_dim"))),
         ("ssm_state", str(cfg.int("ssm_state_size"))), ("n_groups", str(cfg.int("n_groups"))),
         ("conv_kernel", str(cfg.int("conv_kernel")))]]


def _mamba2(proj: str, conv: str) -> list[tuple[str, str | None, str | None]]:
    width = "mamba_heads * mamba_head_dim"
    return [
        ("h = rmsnorm(x)", "norm", None),
        (f"z = linear(h, hidden -> {width}{proj})", "mamba", "in_proj: z, x, B, C and dt"),
        (f"xs = linear(h, hidden -> {width}{proj})", None, None),
        (f"bm = linear(h, hidden -> n_groups * ssm_state{proj})", None, None),
        (f"cm = linear(h, hidden -> n_groups * ssm_state{proj})", None, None),
        (f"dt = linear(h, hidden -> mamba_heads{proj})", None, None),
        ("fuse in_proj { z, xs, bm, cm, dt }", None, "one GEMM, concatenated weights"),
        (f"xc = conv1d(xs, conv_kernel{conv})", None, "short causal conv over x, B and C"),
        (f"bc = conv1d(bm, conv_kernel{conv})", None, None),
        (f"cc = conv1d(cm, conv_kernel{conv})", None, None),
        ("fuse conv { xc, bc, cc }", None, "one causal_conv1d kernel"),
        ("p = custom(dt, params=3 * mamba_heads)", None,
         "A_log, D and dt_bias: stored, their few FLOPs not costed"),
        ("s = linear_attention(cc, bc, xc, mamba_heads, n_groups, ssm_state, mamba_head_dim, "
         "kv=fp32)", None, "SSD: C the query, B the key; state in fp32"),
        ("y = silu_mul(z, s)", None, "gated RMSNorm: y * silu(z), then the norm"),
        ("n = rmsnorm(y)", None, None),
        (f"o = linear(n, {width} -> hidden{proj})", None, None),
        ("x = add(x, o)", None, None)]


def _self_attention(bias: str) -> list[tuple[str, str | None, str | None]]:
    return [
        ("h = rmsnorm(x)", "norm", None),
        (f"q = linear(h, hidden -> heads * head_dim{bias})", "attention", None),
        (f"k = linear(h, hidden -> kv_heads * head_dim{bias})", None, None),
        (f"v = linear(h, hidden -> kv_heads * head_dim{bias})", None, None),
        ("fuse qkv { q, k, v }", None, "one GEMM, concatenated weights"),
        ("a = attention(q, k, v, heads, kv_heads, head_dim)", None, None),
        (f"o = linear(a, heads * head_dim -> hidden{bias})", None, None),
        ("x = add(x, o)", None, None)]


def _relu2_mlp(bias: str) -> list[tuple[str, str | None, str | None]]:
    return [
        ("h = rmsnorm(x)", "norm", None),
        (f"u = linear(h, hidden -> ffn{bias})", "mlp", "not gated: up, relu^2, down"),
        ("r = relu(u)", None, None),
        (f"d = linear(mul(r, r), ffn -> hidden{bias})", None, None),
        ("x = add(x, d)", None, None)]


def _read_nemotron_h(cfg: Config) -> dict[str, Any]:
    _nemotron_checks(cfg)
    layers, hidden = _layer_count(cfg), cfg.int("hidden_size")
    plan = _nemotron_plan(cfg, layers)
    bias = {k: ", bias=1" if cfg.flag(k) else ""
            for k in ("mamba_proj_bias", "attention_bias", "mlp_bias")}
    conv = ", bias=1" if cfg.flag("use_conv_bias", True) else ""
    kinds = {"mamba2": _mamba2(bias["mamba_proj_bias"], conv),
             "self_attention": _self_attention(bias["attention_bias"]),
             "relu2_mlp": _relu2_mlp(bias["mlp_bias"])}
    used = {token[0] for token in plan}
    groups = ["embedding"] + [g for g, k in (("mamba", "mamba2"), ("attention", "self_attention"),
                                             ("mlp", "relu2_mlp")) if k in used]
    notes = ["Nemotron-H: each block is one mixer with its RMSNorm and residual: Mamba-2 (M), "
             "GQA attention without positional embedding (*) or a squared-ReLU MLP (-), as "
             "hybrid_override_pattern spells them.",
             "Mamba-2: in_proj gives z, x, B, C and dt as one GEMM, a short causal conv over "
             "x, B and C, the SSD scan with a fixed state per sequence, a gated RMSNorm "
             "(grouped: same weights) and out_proj."]
    return {"params": _nemotron_params(cfg, hidden), "plan": plan,
            "layers": {k: v for k, v in kinds.items() if k in used},
            "policy": [f"  policy full {{ split {', '.join(groups + ['lm_head'])} over tp }}"],
            "notes": notes, "layer_count": layers}


# ---- config -> Hybrid -------------------------------------------------------------------------

READERS: dict[str, Callable[[Config], dict[str, Any]]] = {
    "qwen3_next": _read_qwen3_next, "qwen3_5": _read_qwen3_next, "qwen3_5_moe": _read_qwen3_next,
    "nemotron_h": _read_nemotron_h}
# Families whose config wraps the language model in a `text_config` (multimodal releases).
WRAPPED = ("qwen3_5", "qwen3_5_moe")
def read_hybrid(data: Mapping[str, Any], source: str = "config.json",
                quant: tuple[Mapping[str, Any], str] | None = None, name: str | None = None,
                gguf: str | None = None) -> Hybrid:
    """Check a hybrid family's config and build its `Hybrid`."""
    family, vision = Config(data, source).str("model_type"), data.get("vision_config")
    if family in WRAPPED:
        data = text_model(data, source, family)
    cfg = Config(data, source)
    parts = READERS[family](cfg)
    counted, notes = held_tower(family, vision, data, source)
    parts["notes"] += notes
    if counted:
        parts["params"].append([("vision_params", str(counted[0]))])
    title = title_of(data, source)
    archs = data.get("architectures")
    ok = isinstance(archs, list) and all(isinstance(a, str) for a in archs)
    return Hybrid(name=identifier(name or title or family), title=title or family,
                  source=source, family=family,
                  architecture=", ".join(safe_text(a) for a in archs) if ok else "",
                  params=parts["params"], formats=_formats(cfg, parts["layer_count"], quant, gguf),
                  tied=cfg.flag("tie_word_embeddings"), layers=_layer_lines(parts["layers"]),
                  plan=parts["plan"], policy=parts["policy"], notes=parts["notes"],
                  context=trained_context(cfg), vision=counted[0] if counted else None)


def _layer_lines(kinds: Mapping[str, list[tuple[str, str | None, str | None]]]
                 ) -> dict[str, list[str]]:
    """Each layer's body as op lines (`{` comments open a block, as the moe body)."""
    out = {}
    for name, body in kinds.items():
        lines = []
        for code, group, comment in body:
            depth = 2 + (len(code) - len(code.lstrip())) // 2
            brace = comment == "{"
            lines.append(op_line(code.strip(), depth, group=group,
                             comment=None if brace else comment, suffix="{" if brace else ""))
        out[name] = lines
    return out


# ---- qwen3_vl: the text model of a vision-language config -------------------------------------

# Releases whose language model is a family import-hf reads: model_type -> (where the
# text model is: its `text_config` or the config itself, and its family; None: the
# text_config's own model_type, through TEXT_ALIASES).
VL_TEXT: dict[str, tuple[str, str | None]] = {
    "qwen3_vl": ("text_config", "qwen3"), "qwen3_vl_moe": ("text_config", "qwen3_moe"),
    "kimi_k25": ("text_config", None), "mistral3": ("text_config", None),
    "qwen2_5_vl": ("flat", "qwen2"), "ministral3": ("flat", "mistral")}
# Text model types that are a known family under another name (Ministral 3 / Devstral 2:
# Mistral's dense decoder).
TEXT_ALIASES = {"ministral3": "mistral"}


def read_vl(data: Mapping[str, Any], source: str = "config.json",
            quant: tuple[Mapping[str, Any], str] | None = None, name: str | None = None,
            gguf: str | None = None) -> Arch:
    """A vision-language (or renamed) release's language model as the Arch of its text
    family; its vision tower held (group vision) where vision.py counts that kind, else
    left out and named in the header."""
    wrapper, vision = Config(data, source).str("model_type"), data.get("vision_config")
    where, family = VL_TEXT[wrapper]
    if where == "flat":
        text = dict(data) | {"model_type": family}
    else:
        inner = data.get("text_config")
        own = inner.get("model_type") if isinstance(inner, dict) else None
        text = text_model(data, source, family or TEXT_ALIASES.get(own, own))
    arch = read_arch(text, source, quant, name, gguf)
    counted, notes = held_tower(wrapper, vision, text, source)
    return replace(arch, family=wrapper, notes=arch.notes + notes, vision=counted)


def held_tower(wrapper: str, vision: Any, text: Mapping[str, Any], source: str
               ) -> tuple[tuple[int, str] | None, tuple[str, ...]]:
    """A wrapper's vision tower counted and held (compiler/hf/vision.py), or for a tower
    kind with no counter, the header line saying it is left out; none: (None, ())."""
    if not isinstance(vision, dict):
        return None, ()
    if wrapper in TOWERS:
        return tower(wrapper, vision, text, source)
    return None, (_vision_note(Config(vision, f"{source} vision_config")),)


def _vision_note(vision: Config) -> str:
    depth, width = vision.opt_int("depth"), vision.opt_int("hidden_size")
    shape = f" ({depth} blocks of width {width})" if depth and width else ""
    return (f"The vision tower{shape} is not in this spec: it runs once per image in "
            "prefill, a decode step never reads it, and its weights are not counted in "
            "params or memory; the language model from text_config is.")


# ---- Hybrid -> text ---------------------------------------------------------------------------

def render_hybrid(model: Hybrid) -> str:
    """The spec text: header, params, dtypes, policies, layer definitions, the calls."""
    lines = _header(model) + [f'model {model.name} "{model.title}" {{']
    if model.context:
        lines.append(f"  trained_context = {model.context}")
    lines += [_pairs(pairs) for pairs in model.params]
    f = model.formats
    lines += [f"  weights: {f.weights}; kv: {f.kv}; act: {f.act}"] + model.policy + [""]
    for name, body in model.layers.items():
        lines += [f"  layer {name}(x) {{"] + body + ["  }", ""]
    lines.append(op_line("x = embed(tokens, vocab -> hidden)", 1, group="embedding"))
    lines += _calls(model.plan)
    head = "logits = linear(rmsnorm(x), hidden -> vocab" + (", tied=1" if model.tied else "")
    lines.append(op_line(head + ", last_token=1)", 1, group="lm_head"))
    lines += [vision_line()] if model.vision else []
    return "\n".join(lines + ["}", ""])


def _pairs(pairs: list[tuple[str, str]]) -> str:
    return "  " + "; ".join(f"{k} = {v}" for k, v in pairs)


def _header(model: Hybrid) -> list[str]:
    kind = model.family + (f", {model.architecture}" if model.architecture else "")
    f = model.formats
    lines = [f"Imported by `infest import-hf` from {safe_text(Path(model.source).name)} ({kind}).",
             *model.notes,
             f"LM head {'tied to' if model.tied else 'separate from'} the embedding.",
             f"Formats: {f.weights} weights, KV cache and activations; recurrent states fp32.",
             "Rope, dropout and scaling factors do not change bytes or FLOPs here."]
    return [f"# {row}" for text in lines for row in textwrap.wrap(text, 86)]


def _calls(plan: list[Token]) -> list[str]:
    """The layer calls, each run of a repeated unit as one `repeat` block."""
    lines = []
    for count, unit in compress(plan):
        if count == 1:
            lines += [op_line(f"x = {call}(x)", 1) for token in unit for call in token]
            continue
        whole = count * len(unit) == len(plan)
        text = ("layers" if len(unit) == 1 else f"layers / {len(unit)}") if whole else str(count)
        lines.append(f"  repeat {text} {{")
        lines += [op_line(f"x = {call}(x)", 2) for token in unit for call in token]
        lines.append("  }")
    return lines


def compress(plan: list[Token]) -> list[tuple[int, list[Token]]]:
    """(count, unit) runs covering `plan` in order: at each position the unit of at most
    MAX_UNIT blocks whose back-to-back repeats cover the most blocks (count >= 2; a tie
    goes to the shorter unit), else the one block."""
    runs: list[tuple[int, list[Token]]] = []
    i = 0
    while i < len(plan):
        best = (1, 1)  # (count, unit length)
        for size in range(1, min(MAX_UNIT, len(plan) - i) + 1):
            count = _repeats(plan, i, size)
            if count >= 2 and count * size > best[0] * best[1]:
                best = (count, size)
        count, size = best
        runs.append((count, plan[i:i + size]))
        i += count * size
    return runs


def _repeats(plan: list[Token], start: int, size: int) -> int:
    unit, count = plan[start:start + size], 1
    while plan[start + count * size:start + (count + 1) * size] == unit:
        count += 1
    return count
