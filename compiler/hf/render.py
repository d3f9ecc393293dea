"""Laying out an imported model as .arch text (`infest import-hf`): the intermediate
model a config is read into (`Arch`: dimensions, attention, experts, a per-layer plan,
number formats) and `render`, which writes it like the shipped specs: header comments,
params on top, one `layer` definition per distinct decoder body (dense, MoE; the window is
an argument), `repeat` blocks calling them, groups and fusions. Text from the config
reaches the spec only through `safe_text` (comments) and `identifier` (names)."""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infest.compiler.passes.policy import STANDARD_TP
from infest.compiler.hf.quant import Formats

_OP_COLUMN = 54  # where `group` and trailing comments start, as in the shipped specs

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
    norm: str = "rmsnorm"               # the norm op: rmsnorm, or layernorm (with a bias)
    post_only: bool = False             # OLMo 2, EXAONE 4: norms on the outputs only
    parallel: int = 0                   # attention and MLP side by side from one input:
                                        # 1 norm shared (Phi, Falcon-7B), 2 norms (Falcon-40B)
    gated: bool = True                  # False: up, activation (`glu`), down
    head_bias: bool = False             # the LM head has a bias (Phi)
    mtp_layers: int = 0                 # multi-token-prediction layers: held, not run
    vision: tuple[int, str] | None = None  # a vision tower's params and what it is: held


# ---- text from the config ------------------------------------------------------------

def safe_text(text: Any) -> str:
    """Config text bound for a comment: word characters and . + - only (no newline can
    end the comment and start spec text)."""
    return re.sub(r"[^\w.+-]", "", str(text))[:60]


# ---- Arch -> text -----------------------------------------------------------------------

def render(arch: Arch) -> str:
    """The spec text: header comments, params, dtypes, embedding, layers, LM head."""
    lines = _header(arch) + [f'model {arch.name} "{arch.title}" {{']
    lines += _param_lines(arch) + [_dtype_line(arch.formats)] + _policy_lines(arch) + [""]
    lines.append(op_line("x = embed(tokens, vocab -> hidden" + _kw(arch, "embed") + ")", 1,
                     group="embedding"))
    lines[-1:-1] = _layer_defs(arch)
    for count, kinds in _runs(arch):
        lines += _repeat(arch, count, kinds)
    head = f"logits = linear({arch.norm}(x), hidden -> vocab" + (", tied=1" if arch.tied else "") \
        + (", bias=1" if arch.head_bias else "")
    # Engines compute logits only at the position they sample from: one token a sequence.
    lines.append(op_line(head + _kw(arch, "lm_head") + ", last_token=1)", 1, group="lm_head"))
    return "\n".join(lines + held_lines(arch) + ["}", ""])


def _policy_lines(arch: Arch) -> list[str]:
    """The shipped specs' policies: `full` (Megatron tensor parallel; routed experts over
    ep with dispatch and combine) and, for MoE, `experts_only`."""
    present = {"embedding", "attention", "lm_head"} | ({"mlp"} if arch.ffn else set())
    if arch.experts and arch.experts.shared_ffn:
        present.add("shared_expert")
    groups = [g for g in STANDARD_TP if g in present]  # the one standard split (policy.py)
    split = f"split {', '.join(groups)} over tp"
    if not arch.experts:
        return [f"  policy full {{ {split} }}"]
    return ["  policy full {", f"    {split}", "    split experts over ep by all_to_all", "  }",
            "  policy experts_only { split experts over ep }"]


def _header(arch: Arch) -> list[str]:
    att, moe = arch.attention, arch.experts
    kind = f"{arch.family}" + (f", {arch.architecture}" if arch.architecture else "")
    lines = [f"Imported by `infest import-hf` from {safe_text(Path(arch.source).name)} ({kind}).",
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
    size += [("mtp_layers", str(arch.mtp_layers))] if arch.mtp_layers else []
    size += [("vision_params", str(arch.vision[0]))] if arch.vision else []
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


def op_line(code: str, depth: int, group: str | None = None, comment: str | None = None,
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
    return [op_line(f"repeat {count} {{", 1)] + calls + ["  }"]


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
    return op_line(f"x = {name}({', '.join(['x'] + args)})", depth, comment=comment)


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
    return lines + (_mtp_layer(arch) if arch.mtp_layers else [])


def _mtp_layer(arch: Arch) -> list[str]:
    """DeepSeek-style multi-token prediction: the next token's embedding and the main
    model's last hidden state, each RMSNormed, projected together (eh_proj, written as its
    two halves), one decoder layer like the model's last, and a final norm."""
    last = arch.plan[-1]
    call = layer_call(_layer_name(arch, last), ["0"] if _windowed(arch) else [])
    body = [op_line("e = rmsnorm(x)", 2, group="norm", comment="enorm: the next token's embedding"),
            op_line("n = rmsnorm(x)", 2, comment="hnorm: the main model's hidden state"),
            op_line("pe = linear(e, hidden -> hidden)", 2, group="mtp_proj",
                    comment="eh_proj, the embedding's half"),
            op_line("pn = linear(n, hidden -> hidden)", 2, comment="eh_proj, the hidden state's half"),
            op_line("x = add(pe, pn)", 2), call,
            op_line("x = rmsnorm(x)", 2, group="norm", comment="the MTP head's norm")]
    return layer_block("mtp", ["x"], body, "Multi-token prediction: one draft layer; the "
                       "embedding and LM head are the main model's (engines share them).")


def vision_line() -> str:
    """The op that holds a vision tower's weights (`vision_params`) in group vision."""
    return op_line("vis = held(params = vision_params)", 1, group="vision",
                   comment="vision tower: held, not run in decode")


def held_lines(arch: Arch) -> list[str]:
    """The weights a step holds but does not run, after the logits: the vision tower
    (group vision) and the MTP layers (group mtp, calling `layer mtp`)."""
    lines = [vision_line()] if arch.vision else []
    if arch.mtp_layers:
        lines += [op_line("draft = held(x)", 1, group="mtp", suffix="{",
                          comment="MTP layers: held, not run in a plain step"),
                  "    repeat mtp_layers {", "      x = mtp(x)", "    }", "  }"]
    return lines


def _attention_lines(arch: Arch, kind: Layer) -> list[str]:
    att = arch.attention
    if arch.post_only:  # OLMo 2 / EXAONE 4: the sublayer reads the residual itself
        return _gqa_lines(arch, kind, "x") + [
            op_line("po = rmsnorm(o)", 2, group="norm", comment="post_attention_layernorm"),
            op_line("x = add(x, po)", 2),
            op_line("fuse attn_norm_add { po, x }", 2, comment="RMSNorm + residual add, one kernel")]
    lines = [op_line(f"h = {arch.norm}(x)", 2, group="norm")]
    lines += _mla_lines(arch) if att.mla is not None else _gqa_lines(arch, kind)
    if arch.parallel:  # the MLP reads the same input; both outputs join the residual after
        return lines
    if arch.post_norms:
        return lines + [op_line("po = rmsnorm(o)", 2, group="norm",
                            comment="post_attention_layernorm"), op_line("x = add(x, po)", 2)]
    return lines + [op_line("x = add(x, o)", 2)]


def _gqa_lines(arch: Arch, kind: Layer, src: str = "h") -> list[str]:
    att, kw = arch.attention, _kw(arch, "attention")
    qkv = ", bias=1" if att.qkv_bias else ""
    lines = [op_line(f"q = linear({src}, hidden -> heads * head_dim{qkv}{kw})", 2,
                     group="attention"),
             op_line(f"k = linear({src}, hidden -> kv_heads * head_dim{qkv}{kw})", 2),
             op_line(f"v = linear({src}, hidden -> kv_heads * head_dim{qkv}{kw})", 2),
             op_line("fuse qkv { q, k, v }", 2, comment="one GEMM, concatenated weights")]
    if att.qk_norm:
        dim, what = ("", "over all heads") if att.qk_norm_whole else \
            (", dim=head_dim", "head_dim weights")
        lines += [op_line(f"q = rmsnorm(q{dim})", 2, comment=f"QK-norm: {what}"),
                  op_line(f"k = rmsnorm(k{dim})", 2),
                  op_line("fuse qk_norm { q, k }", 2, comment="both QK-norms in one kernel")]
    extra = (", window=window" if kind.sliding else "") + (", sinks=1" if att.sinks else "")
    lines.append(op_line(f"a = attention(q, k, v, heads, kv_heads, head_dim{extra}"
                     f"{_kw(arch, 'attention_core')})", 2))
    o_bias = ", bias=1" if att.o_bias else ""
    return lines + [op_line(f"o = linear(a, heads * head_dim -> hidden{o_bias}{kw})", 2)]


_LATENT = op_line("c = linear(h, hidden -> kv_lora_rank + rope_dim{kw})", 2, group="latent",
              comment="latent + shared rope key")
_LATENT_NORM = op_line("c = rmsnorm(c, dim=kv_lora_rank)", 2, comment="kv_a_layernorm (latent part)")


def _mla_lines(arch: Arch) -> list[str]:
    kw = _kw(arch, "attention")
    q_out = "heads * (nope_dim + rope_dim)"
    if arch.attention.mla and arch.attention.mla["q_lora_rank"] is not None:
        # The latent down-projections stay whole under tensor parallel, as in engines.
        # Engines run both down-projections as one GEMM and both latent norms as one kernel.
        lines = [op_line(f"cq = linear(h, hidden -> q_lora_rank{kw})", 2, group="latent"),
                 _LATENT,
                 op_line("fuse fuse_a { cq, c }", 2, comment="one GEMM: q_a and kv_a concatenated"),
                 op_line("cq = rmsnorm(cq)", 2, comment="q_a_layernorm"),
                 _LATENT_NORM,
                 op_line("fuse latent_norms { cq, c }", 2, comment="both latent RMSNorms in one kernel"),
                 op_line(f"q = linear(cq, q_lora_rank -> {q_out}{kw})", 2, group="attention")]
    else:
        lines = [op_line(f"q = linear(h, hidden -> {q_out}{kw})", 2, group="attention"),
                 _LATENT, _LATENT_NORM]
    sparse = ", index_topk=index_topk" if arch.attention.indexer else ""
    return [line.replace("{kw}", kw) for line in lines] + _indexer_lines(arch) + [
        op_line(f"a = mla(q, c, heads, kv_lora_rank, rope_dim, nope_dim, v_dim{sparse}"
            f"{_kw(arch, 'attention_core')})", 2, group="attention"),
        op_line(f"o = linear(a, heads * v_dim -> hidden{kw})", 2)]


def _indexer_lines(arch: Arch) -> list[str]:
    """DeepSeek-V3.2's lightning indexer (inference/model.py `Indexer`): q from the normed
    q latent (wq_b), one key from h (wk, then a LayerNorm k_norm), a weight per head
    (weights_proj); its key cache is fp8, as in DeepSeek's code."""
    if arch.attention.indexer is None:
        return []
    kw = _kw(arch, "attention")
    src = "cq, q_lora_rank" if arch.attention.mla and arch.attention.mla["q_lora_rank"] \
        else "h, hidden"
    return [op_line(f"iq = linear({src} -> index_heads * index_head_dim{kw})", 2, group="indexer",
                comment="lightning indexer"),
            op_line(f"ik = linear(h, hidden -> index_head_dim{kw})", 2),
            op_line("kn = layernorm(ik)", 2, comment="k_norm"),
            op_line(f"iw = linear(h, hidden -> index_heads{kw})", 2, comment="weights_proj"),
            op_line("sel = indexer(iq, kn, index_heads, index_head_dim, index_topk, kv=fp8)", 2,
                comment="scores every cached token, keeps index_topk")]


def _mlp_lines(arch: Arch, kind: Layer) -> list[str]:
    if arch.post_only or arch.parallel or not arch.gated:
        return _plain_mlp_lines(arch, kind)
    post = "po, " if arch.post_norms else ""
    lines = [op_line("h = rmsnorm(x)", 2, group="norm"),
             op_line(f"fuse add_norm {{ {post}x, h }}", 2,
                 comment=f"{'norm + ' if post else ''}residual add + RMSNorm, one kernel")]
    if not kind.moe:
        bias = ", bias=1" if arch.mlp_bias else ""
        lines += _glu_lines(arch, "ffn", bias + _kw(arch, "mlp"), 2, "mlp")
        if arch.post_norms:
            return lines + _post_mlp_lines(arch)
        return lines + [op_line("x = add(x, d)", 2)] + _glu_fusions(arch, "gate_up", "down_add", "d")
    return lines + _moe_lines(arch)


def _plain_mlp_lines(arch: Arch, kind: Layer) -> list[str]:
    """The MLP of a post-norm layer (OLMo 2: it reads the residual, a norm on its output)
    or of a parallel one (Phi, Falcon, Cohere: it reads the attention's input; both
    outputs join the residual); dense, gated or not."""
    src = "x" if arch.post_only else "h"
    lines = []
    if arch.parallel == 2:  # Falcon-40B: its own LayerNorm (ln_mlp)
        lines, src = [op_line(f"h2 = {arch.norm}(x)", 2, group="norm", comment="ln_mlp")], "h2"
    if not (arch.parallel or arch.post_only):  # StarCoder2: a pre-norm, ungated MLP
        return [op_line(f"h = {arch.norm}(x)", 2, group="norm")] + _ffn_lines(arch, kind, src) \
            + [op_line("x = add(x, d)", 2), _up_fusion(arch)]
    lines += _ffn_lines(arch, kind, src)
    if arch.post_only:
        return lines + [op_line("pd = rmsnorm(d)", 2, group="norm",
                                comment="post_feedforward_layernorm"),
                        op_line("x = add(x, pd)", 2), _up_fusion(arch),
                        op_line("fuse post_norm_add { pd, x }", 2,
                                comment="RMSNorm + residual add, one kernel")]
    return lines + [op_line("x = add(x, o)", 2), op_line("x = add(x, d)", 2), _up_fusion(arch)]


def _ffn_lines(arch: Arch, kind: Layer, src: str) -> list[str]:
    bias = (", bias=1" if arch.mlp_bias else "") + _kw(arch, "mlp")
    if arch.gated:
        return [line.replace("linear(h,", f"linear({src},")
                for line in _glu_lines(arch, "ffn", bias, 2, "mlp")]
    return [op_line(f"u = linear({src}, hidden -> ffn{bias})", 2, group="mlp",
                    comment="not gated: up, activation, down"),
            op_line(f"d = linear({arch.glu}(u), ffn -> hidden{bias})", 2)]


def _up_fusion(arch: Arch) -> str:
    """The up GEMM (gate+up when gated) with the activation in its epilogue."""
    if arch.gated:
        return _glu_fusions(arch, "gate_up", "", "d")[0]
    return op_line(f"fuse up_act {{ u, d.{arch.glu} }}", 2,
                   comment="up GEMM with the activation in its epilogue")


def _post_mlp_lines(arch: Arch) -> list[str]:
    """Gemma's post_feedforward_layernorm before the residual add, fused with it."""
    return [op_line("pd = rmsnorm(d)", 2, group="norm", comment="post_feedforward_layernorm"),
            op_line("x = add(x, pd)", 2),
            _glu_fusions(arch, "gate_up", "", "d")[0],
            op_line("fuse post_norm_add { pd, x }", 2, comment="RMSNorm + residual add, one kernel")]


def _glu_fusions(arch: Arch, up: str, down: str, d: str, prefix: str = "",
                 combine: str = "") -> list[str]:
    """`fuse` lines for a gated MLP: gate+up GEMM with its activation, then the down
    GEMM with the residual add (and a moe block's combine) in its epilogue."""
    g, u = f"{prefix}g", f"{prefix}u"
    return [op_line(f"fuse {up} {{ {g}, {u}, {d}.{arch.glu} }}", 2,
                comment="gate+up GEMM with the activation in its epilogue"),
            op_line(f"fuse {down} {{ {d},{combine} x }}", 2,
                comment="residual add in the GEMM epilogue")]


def _glu_lines(arch: Arch, width: str, kw: str, depth: int, group: str | None,
               prefix: str = "", comment: str | None = None) -> list[str]:
    g, u, d = f"{prefix}g", f"{prefix}u", f"{prefix}d"
    return [op_line(f"{g} = linear(h, hidden -> {width}{kw})", depth, group=group, comment=comment),
            op_line(f"{u} = linear(h, hidden -> {width}{kw})", depth),
            op_line(f"{d} = linear({arch.glu}({g}, {u}), {width} -> hidden{kw})", depth)]


def _moe_lines(arch: Arch) -> list[str]:
    moe = arch.experts
    assert moe is not None
    router = "r = router(h, hidden -> experts" + (", bias=1" if moe.router_bias else "")
    lines = [op_line(router + _kw(arch, "router") + ")", 2, group="router"),
             op_line("m = moe(h, experts=experts, top_k=top_k)", 2, group="experts", suffix="{")]
    lines += [op_line(_decl(k, v), 3) for k, v in arch.formats.overrides.get("experts", {}).items()]
    bias = ", bias=1" if moe.bias else ""
    lines += _glu_lines(arch, "expert_ffn", bias, 3, None, comment="one expert's gated MLP")
    lines += ["    }", op_line("x = add(x, m)", 2)]
    lines += _glu_fusions(arch, "experts_up", "experts_down", "d", combine=" m,")
    if moe.shared_ffn:
        lines += _glu_lines(arch, "shared_ffn", _kw(arch, "shared_expert"), 2,
                            "shared_expert", prefix="s", comment="every token: always read")
        lines.append(op_line("x = add(x, sd)", 2))
        lines += _glu_fusions(arch, "shared_up", "shared_add", "sd", prefix="s")
    return lines
