"""The op vocabulary: for each op kind its signature and cost rule (DOMAIN.md).

Every rule sees one op instance with its tensor inputs and resolved numeric args and
returns the output width, params, a Cost, and the KV cache it holds per sequence.
Activation tensors are [B*T tokens, width]; the token dimension is implicit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import sympy

from infest.compiler.cost import Cost, ZERO
from infest.compiler.dtypes import DType
from infest.compiler.symbols import B, N, T, sym

# L: tokens held in each sequence's cache after the step (N + T).
L = sym("L_ctx")


@dataclass(frozen=True)
class Tensor:
    """An activation [B*T, width] and the op that produced it."""

    width: sympy.Expr
    producer: str | None
    last_token: bool = False  # one row per sequence (the position engines sample from)
    ops: tuple[str, ...] = ()  # every op its binding elaborated (nested calls first)


@dataclass(frozen=True)
class DTypes:
    """The formats one op uses."""

    weights: DType
    kv: DType
    act: DType
    math: DType
    residual: DType  # the residual stream's format: what tensor-parallel reductions move


@dataclass(frozen=True)
class OpIn:
    """One op instance's resolved inputs."""

    tensors: tuple[Tensor, ...]
    dims: tuple[sympy.Expr, sympy.Expr] | None
    args: dict[str, sympy.Expr]
    dt: DTypes
    equal: Callable[[sympy.Expr, sympy.Expr], bool]  # compares widths at param defaults
    last_token: bool = False  # runs on each sequence's last position only (logits)

    @property
    def x(self) -> Tensor:
        return self.tensors[0]

    @property
    def tokens(self) -> sympy.Expr:
        """Rows processed this step: B*T, or B for a last-token op (engines compute
        logits only where they sample, in prefill and in a chunk of T new tokens alike)."""
        return B if self.last_token else B * T


@dataclass(frozen=True)
class OpOut:
    """What a rule returns for one instance."""

    width: sympy.Expr
    cost: Cost
    params: sympy.Expr = ZERO
    kv_cache: sympy.Expr = ZERO          # bytes held per sequence with L tokens
    kv_per_token: sympy.Expr = ZERO      # bytes per cached token at full retention


class ShapeMismatch(Exception):
    """A rule found an input of the wrong width: (input index, expected, message)."""

    def __init__(self, index: int, expected: sympy.Expr, what: str) -> None:
        super().__init__(what)
        self.index, self.expected, self.what = index, expected, what


@dataclass(frozen=True)
class OpRule:
    """Signature and cost rule of an op kind."""

    tensors: tuple[int, int]                 # (min, max) tensor inputs
    rule: Callable[[OpIn], OpOut]
    dims: bool = False                        # needs `d_in -> d_out`
    args: tuple[str, ...] = ()                # numeric args, positional order
    defaults: dict[str, int] = field(default_factory=dict)
    doc: str = ""


def _act(op: OpIn, elements: sympy.Expr) -> sympy.Expr:
    return elements * _b(op.dt.act)


# Bytes per KV-cache element: an input (the spec's kv dtype by default, see
# compiler/elaborate.py) so a what-if switches the cache to fp8 without editing the spec.
KV_ELEM_NAME = "kv_bytes_per_elem"
KV_ELEM = sym(KV_ELEM_NAME)


def _b(dtype: DType) -> sympy.Expr:
    return sympy.Rational(dtype.bytes.numerator, dtype.bytes.denominator)


# ---- dense ops ---------------------------------------------------------------------

def _embed(op: OpIn) -> OpOut:
    # Row gather: only the B*T looked-up rows are read; no FLOPs.
    vocab, d = op.dims  # type: ignore[misc]
    cost = Cost(weight_bytes=op.tokens * d * _b(op.dt.weights), act_bytes=_act(op, op.tokens * d))
    return OpOut(d, cost, params=vocab * d)


def _linear(op: OpIn, kernels: int = 1) -> OpOut:
    d_in, d_out = op.dims  # type: ignore[misc]
    _require(op, 0, d_in, "the input width must equal d_in")
    params = d_in * d_out + (d_out if op.args.get("bias", 0) else 0)
    cost = Cost(flops=2 * op.tokens * d_in * d_out,  # one multiply-add per weight per token
                weight_bytes=params * _b(op.dt.weights),
                act_bytes=_act(op, op.tokens * (d_in + d_out)),
                kernels=sympy.Integer(kernels))
    # A head tied to the embedding still reads its weights but stores no params of its own.
    return OpOut(d_out, cost, params=sympy.Integer(0) if op.args.get("tied", 0) else params)


def _norm(per_elem: int, weights_per_dim: int) -> Callable[[OpIn], OpOut]:
    def rule(op: OpIn) -> OpOut:
        width = op.x.width
        dim = op.args.get("dim", width)  # QK-norm: one head_dim vector shared by heads
        elements = op.tokens * width
        cost = Cost(flops=per_elem * elements, act_bytes=_act(op, 2 * elements),
                    weight_bytes=weights_per_dim * dim * _b(op.dt.weights))
        return OpOut(width, cost, params=weights_per_dim * dim)
    return rule


def _elementwise(flops_per_elem: int) -> Callable[[OpIn], OpOut]:
    def rule(op: OpIn) -> OpOut:
        width = op.x.width
        for i, t in enumerate(op.tensors[1:], start=1):
            _require(op, i, width, "elementwise inputs must have equal widths")
        elements = op.tokens * width
        cost = Cost(flops=flops_per_elem * elements,
                    act_bytes=_act(op, (len(op.tensors) + 1) * elements))
        return OpOut(width, cost)
    return rule


def _require(op: OpIn, index: int, expected: sympy.Expr, what: str) -> None:
    """Input `index` must have width `expected` (checked numerically by the elaborator)."""
    if not op.equal(op.tensors[index].width, expected):
        raise ShapeMismatch(index, expected, what)


# ---- attention ---------------------------------------------------------------------

def _keys_per_query(op: OpIn) -> sympy.Expr:
    """Keys each new token attends to, averaged: N cached + (T+1)/2 causal, capped by window."""
    keys = N + (T + 1) / sympy.Integer(2)
    window = _window(op)
    return keys if window is None else sympy.Min(keys, window)


def _cached(op: OpIn, tokens: sympy.Expr) -> sympy.Expr:
    window = _window(op)
    return tokens if window is None else sympy.Min(tokens, window)


def _window(op: OpIn) -> sympy.Expr | None:
    """The sliding window, or None for full attention (no window, or `window = 0`, which
    lets one layer definition serve both kinds of layer)."""
    window = op.args.get("window")
    return None if window is None or window == 0 else window


def _attention(op: OpIn) -> OpOut:
    h, hkv, hd = op.args["heads"], op.args["kv_heads"], op.args["head_dim"]
    _require(op, 0, h * hd, "q must be heads * head_dim wide")
    for i in (1, 2):
        _require(op, i, hkv * hd, "k and v must be kv_heads * head_dim wide")
    per_token = 2 * hkv * hd * KV_ELEM  # K and V
    # Attention sinks (gpt-oss): one learned logit per head joins every softmax; its
    # FLOPs (one extra term per head per query) are negligible and not counted.
    sinks = h if op.args.get("sinks", 0) else sympy.Integer(0)
    cost = Cost(flops=4 * op.tokens * h * hd * _keys_per_query(op),  # QK^T and PV: 2+2
                weight_bytes=sinks * _b(op.dt.weights),
                act_bytes=_act(op, op.tokens * (2 * h * hd + 2 * hkv * hd)),
                kv_bytes=B * _cached(op, N) * per_token + op.tokens * per_token)
    return OpOut(h * hd, cost, params=sinks, kv_cache=_cached(op, L) * per_token,
                 kv_per_token=per_token)


def _mla(op: OpIn) -> OpOut:
    """Multi-head latent attention, absorbed form: the cache holds one latent per token."""
    h, rank = op.args["heads"], op.args["kv_lora_rank"]
    rope, nope, vd = op.args["rope_dim"], op.args["nope_dim"], op.args["v_dim"]
    _require(op, 0, h * (nope + rope), "q must be heads * (nope_dim + rope_dim) wide")
    _require(op, 1, rank + rope, "the latent must be kv_lora_rank + rope_dim wide")
    params = rank * h * (nope + vd)  # kv_b_proj, absorbed into q and the output
    per_token = (rank + rope) * KV_ELEM
    absorb = 2 * h * rank * (nope + vd)             # q_nope -> latent, latent -> v
    per_key = 2 * h * (rank + rope) + 2 * h * rank  # scores over latent+rope, values over latent
    cost = Cost(flops=op.tokens * (absorb + per_key * _keys_per_query(op)),
                weight_bytes=params * _b(op.dt.weights),
                act_bytes=_act(op, op.tokens * (h * (nope + rope) + rank + rope + h * vd)),
                kv_bytes=B * _cached(op, N) * per_token + op.tokens * per_token)
    return OpOut(h * vd, cost, params=params, kv_cache=_cached(op, L) * per_token,
                 kv_per_token=per_token)


# ---- routing and escape hatch ------------------------------------------------------

def touched_experts(experts: sympy.Expr, top_k: sympy.Expr, tokens: sympy.Expr) -> sympy.Expr:
    """Expected distinct experts that `tokens` tokens, each routed uniformly to top_k of
    `experts`, touch: E * (1 - (1 - k/E)^tokens), k at one token, approaching E."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


def _moe(op: OpIn) -> OpOut:
    # The container: scatter tokens to k experts and combine their outputs (weighted sum).
    width, k = op.x.width, op.args["top_k"]
    routed = op.tokens * k * width
    return OpOut(width, Cost(flops=routed, act_bytes=_act(op, 2 * routed)))


def _custom(op: OpIn) -> OpOut:
    a = op.args
    width = a.get("width", op.x.width if op.tensors else sympy.Integer(1))
    cost = Cost(flops=a.get("flops", ZERO), weight_bytes=a.get("weight_bytes", ZERO),
                act_bytes=a.get("act_bytes", ZERO), kv_bytes=a.get("kv_bytes", ZERO))
    per_token = a.get("kv_per_token", ZERO)
    return OpOut(width, cost, params=a.get("params", ZERO), kv_cache=per_token * L,
                 kv_per_token=per_token)


OPS: dict[str, OpRule] = {
    "embed": OpRule((1, 1), _embed, dims=True, doc="row gather: params vocab*d, bytes B*T*d"),
    "linear": OpRule((1, 1), _linear, dims=True, args=("bias", "tied"),
                     defaults={"bias": 0, "tied": 0},
                     doc="x @ W: 2*B*T*d_in*d_out FLOPs, weights read once"),
    "router": OpRule((1, 1), lambda op: _linear(op, kernels=2), dims=True, args=("bias",),
                     defaults={"bias": 0},
                     doc="MoE gate: a linear (bias=1: plus a bias) and a top-k/softmax kernel"),
    "rmsnorm": OpRule((1, 1), _norm(4, 1), args=("dim",), doc="4 FLOPs/element, d weights"),
    "layernorm": OpRule((1, 1), _norm(7, 2), args=("dim",), doc="7 FLOPs/element, 2d weights"),
    "add": OpRule((2, 2), _elementwise(1), doc="x + y"),
    "mul": OpRule((2, 2), _elementwise(1), doc="x * y"),
    "silu_mul": OpRule((2, 2), _elementwise(5), doc="silu(g) * u: 5 FLOPs/element"),
    "gelu_mul": OpRule((2, 2), _elementwise(9), doc="gelu(g) * u: 9 FLOPs/element"),
    "silu": OpRule((1, 1), _elementwise(4), doc="x * sigmoid(x): 4 FLOPs/element"),
    "gelu": OpRule((1, 1), _elementwise(8), doc="tanh GELU: 8 FLOPs/element"),
    "relu": OpRule((1, 1), _elementwise(1), doc="max(x, 0)"),
    "rope": OpRule((1, 1), _elementwise(3), doc="rotary embedding: 3 FLOPs/element"),
    "softmax": OpRule((1, 1), _elementwise(5), doc="exp, sum, divide: 5 FLOPs/element"),
    "attention": OpRule((3, 3), _attention,
                        args=("heads", "kv_heads", "head_dim", "window", "sinks"),
                        doc="GQA over B*N cached tokens; writes B*T new ones; "
                            "sinks=1: a learned sink logit per head"),
    "mla": OpRule((2, 2), _mla, args=("heads", "kv_lora_rank", "rope_dim", "nope_dim",
                                      "v_dim", "window"),
                  doc="latent KV (kv_lora_rank + rope_dim per token), absorbed weights"),
    "moe": OpRule((1, 1), _moe, args=("experts", "top_k"),
                  doc="E routed experts, top-k: body costs scaled per routed token"),
    "custom": OpRule((0, 8), _custom, args=("flops", "weight_bytes", "act_bytes", "kv_bytes",
                                            "params", "width", "kv_per_token"),
                     doc="costs written in the spec"),
}
OPTIONAL_ARGS = {"window", "sinks", "dim", "bias", "tied", "flops", "weight_bytes", "act_bytes", "kv_bytes",
                 "params", "width", "kv_per_token"}
COMMON_KWARGS = ("kernels", "blocks", "weights", "kv", "act", "math", "residual", "bits",
                 "last_token")
# Ops that need every new token: they gather rows, write the KV cache or route tokens,
# so `last_token=1` (or an input that holds only last positions) is refused on them.
EVERY_TOKEN_KINDS = frozenset({"embed", "attention", "mla", "moe"})
