"""The op vocabulary: for each op kind its signature and cost rule (docs/physics.md).

Every rule sees one op instance with its tensor inputs and resolved numeric args and
returns the output width, params, a Cost, and the KV cache it holds per sequence.
Activation tensors are [B*T tokens, width]; the token dimension is implicit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import sympy

from infest.compiler.core.cost import Cost, ZERO
from infest.compiler.core.dtypes import DType
from infest.compiler.core.functions import Max, Min
from infest.compiler.core.symbols import B, N, T, sym

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
    biases: DType    # biases and per-head vectors (sinks) beside the weights; default weights


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
    kv_cache: sympy.Expr = ZERO          # bytes held per sequence with L tokens (a
                                         # recurrent state: a constant, no L)
    kv_per_token: sympy.Expr = ZERO      # bytes per cached token at full retention
    param_bytes: sympy.Expr | None = None  # stored bytes of params; None: all at weights
                                           # (see compiler/forms/model.py stored_bytes)


class ShapeMismatch(Exception):
    """A rule found an input of the wrong width: (input index, expected, message)."""

    def __init__(self, index: int, expected: sympy.Expr, what: str) -> None:
        super().__init__(what)
        self.index, self.expected, self.what = index, expected, what


# Facets every op kind declares (no defaults: a kind lacking one fails when OPS loads).
# parallel: the sharding rule compiler/passes/parallel.py applies (PARALLEL_RULES there):
#   linear (column/row), embed (vocab), attention (heads), norm, elementwise, conv1d
#   (per channel), moe (the container of experts), replicated (whole on every GPU).
PARALLEL_FACETS = ("linear", "embed", "attention", "norm", "elementwise", "conv1d", "moe",
                   "replicated")
# fusion: inside a `fuse` group (compiler/passes/engine.py), "on_chip": an intermediate
# the group alone consumes is neither written nor read back; "opaque": the op's bytes are
# the spec's own and stay as written.
FUSION_FACETS = ("on_chip", "opaque")


@dataclass(frozen=True)
class OpRule:
    """Everything about an op kind in one entry: signature, cost rule, kernel count,
    sharding rule, fusion behaviour and whether it needs every new token."""

    tensors: tuple[int, int]                 # (min, max) tensor inputs
    rule: Callable[[OpIn], OpOut]
    kernels: int                              # launches of one instance (eager engine)
    parallel: str                             # one of PARALLEL_FACETS
    fusion: str                               # one of FUSION_FACETS
    every_token: bool                         # needs every new token (no last_token=1)
    dims: bool = False                        # needs `d_in -> d_out`
    args: tuple[str, ...] = ()                # numeric args, positional order
    defaults: dict[str, int] = field(default_factory=dict)
    doc: str = ""

    def __post_init__(self) -> None:
        if self.parallel not in PARALLEL_FACETS:
            raise ValueError(f"op rule: unknown parallel facet {self.parallel!r}")
        if self.fusion not in FUSION_FACETS:
            raise ValueError(f"op rule: unknown fusion facet {self.fusion!r}")
        if not isinstance(self.kernels, int) or self.kernels < 0:
            raise ValueError(f"op rule: kernels must be a whole number, not {self.kernels!r}")


def _act(op: OpIn, elements: sympy.Expr) -> sympy.Expr:
    return elements * element_bytes(op.dt.act)


# Bytes per KV-cache element: an input (the spec's kv dtype by default, see
# compiler/core/elaborate.py) so a what-if switches the cache to fp8 without editing the spec.
KV_ELEM_NAME = "kv_bytes_per_elem"
KV_ELEM = sym(KV_ELEM_NAME)


def element_bytes(dtype: DType) -> sympy.Expr:
    return sympy.Rational(dtype.bytes.numerator, dtype.bytes.denominator)


# ---- dense ops ---------------------------------------------------------------------

def _embed(op: OpIn) -> OpOut:
    # Row gather: only the B*T looked-up rows are read; no FLOPs.
    vocab, d = op.dims  # type: ignore[misc]
    cost = Cost(weight_bytes=op.tokens * d * element_bytes(op.dt.weights), act_bytes=_act(op, op.tokens * d))
    return OpOut(d, cost, params=vocab * d)


def _linear(op: OpIn) -> OpOut:
    d_in, d_out = op.dims  # type: ignore[misc]
    _require(op, 0, d_in, "the input width must equal d_in")
    bias = d_out if _set(op, "bias") else None
    params, stored = _with_bias(op, d_in * d_out, bias)
    # one multiply-add per weight per token
    cost = Cost(flops=_softcap(op, 2 * op.tokens * d_in * d_out, op.tokens * d_out),
                weight_bytes=params * element_bytes(op.dt.weights) if stored is None else stored,
                act_bytes=_act(op, op.tokens * (d_in + d_out)))
    # A head tied to the embedding still reads its weights but stores no params of its own.
    if _set(op, "tied"):
        return OpOut(d_out, cost, params=ZERO)
    return OpOut(d_out, cost, params=params, param_bytes=stored)


def _with_bias(op: OpIn, weights: sympy.Expr, bias: sympy.Expr | None):
    """(params, stored bytes) of weights plus an optional bias; the bytes are None when
    all sit at the weights dtype (the common case: no extra sympy work per op)."""
    if bias is None:
        return weights, None
    if op.dt.biases == op.dt.weights:
        return weights + bias, None
    return weights + bias, weights * element_bytes(op.dt.weights) + bias * element_bytes(op.dt.biases)


def _set(op: OpIn, name: str) -> bool:
    """A flag or optional argument that is given and not 0 (a param counts as set)."""
    value = op.args.get(name)
    return value is not None and value != 0


# tanh soft-capping, cap * tanh(logit / cap) (Gemma 2): a multiply by 1/cap, the tanh (one
# special-function op) and a multiply by cap, counted as 3 FLOPs per logit.
SOFTCAP_FLOPS = 3


def _softcap(op: OpIn, flops: sympy.Expr, logits: sympy.Expr) -> sympy.Expr:
    """`flops` plus what `softcap=` (0: none) adds over `logits` logits."""
    return flops + SOFTCAP_FLOPS * logits if _set(op, "softcap") else flops


def _norm(per_elem: int, weights_per_dim: int) -> Callable[[OpIn], OpOut]:
    def rule(op: OpIn) -> OpOut:
        width = op.x.width
        dim = op.args.get("dim", width)  # QK-norm: one head_dim vector shared by heads
        elements = op.tokens * width
        cost = Cost(flops=per_elem * elements, act_bytes=_act(op, 2 * elements),
                    weight_bytes=weights_per_dim * dim * element_bytes(op.dt.weights))
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
    """Keys each new token attends to, averaged: N cached + (T+1)/2 causal, capped by the
    window, or exactly by the indexer's selection (`index_topk`)."""
    window = _window(op)
    if _set(op, "index_topk"):
        cap = op.args["index_topk"]
        return _capped_keys(cap if window is None else sympy.Min(cap, window))
    keys = N + (T + 1) / sympy.Integer(2)
    return keys if window is None else sympy.Min(keys, window)


def _capped_keys(cap: sympy.Expr) -> sympy.Expr:
    """The mean over the T new tokens of min(N + j, cap), j = 1..T: the first m =
    min(max(cap - N, 0), T) see N + j keys, the rest cap (prefill at N = 8192, cap 2048:
    1792 keys a query, not 2048)."""
    m = sympy.Min(Max(cap - N, 0), T)
    return (m * N + m * (m + 1) / 2 + (T - m) * cap) / T


def _cached(op: OpIn, tokens: sympy.Expr) -> sympy.Expr:
    window = _window(op)
    return tokens if window is None else sympy.Min(tokens, window)


def _read(op: OpIn) -> sympy.Expr:
    """Cached tokens a sequence's step reads: all it holds, or the `index_topk` selected
    (one query's selection: exact at T = 1, a lower bound when T new tokens select
    different ones)."""
    held = _cached(op, N)
    return sympy.Min(held, op.args["index_topk"]) if _set(op, "index_topk") else held


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
    sinks = h if _set(op, "sinks") else sympy.Integer(0)
    keys = _keys_per_query(op)
    cost = Cost(flops=_softcap(op, 4 * op.tokens * h * hd * keys,  # QK^T and PV: 2+2
                               op.tokens * h * keys),
                weight_bytes=sinks * element_bytes(op.dt.biases),
                act_bytes=_act(op, op.tokens * (2 * h * hd + 2 * hkv * hd)),
                kv_bytes=B * _read(op) * per_token + op.tokens * per_token)
    return OpOut(h * hd, cost, params=sinks, kv_cache=_cached(op, L) * per_token,
                 kv_per_token=per_token,
                 param_bytes=None if op.dt.biases == op.dt.weights else sinks * element_bytes(op.dt.biases))


def _mla(op: OpIn) -> OpOut:
    """Multi-head latent attention: the cache holds one latent per token. FLOPs of the
    cheaper of its two forms (_mla_flops)."""
    h, rank = op.args["heads"], op.args["kv_lora_rank"]
    rope, nope, vd = op.args["rope_dim"], op.args["nope_dim"], op.args["v_dim"]
    _require(op, 0, h * (nope + rope), "q must be heads * (nope_dim + rope_dim) wide")
    _require(op, 1, rank + rope, "the latent must be kv_lora_rank + rope_dim wide")
    params = rank * h * (nope + vd)  # kv_b_proj, absorbed into q and the output
    per_token = (rank + rope) * KV_ELEM
    keys = _keys_per_query(op)
    cost = Cost(flops=_softcap(op, _mla_flops(op), op.tokens * h * keys),
                weight_bytes=params * element_bytes(op.dt.weights),
                act_bytes=_act(op, op.tokens * (h * (nope + rope) + rank + rope + h * vd)),
                kv_bytes=B * _read(op) * per_token + op.tokens * per_token)
    return OpOut(h * vd, cost, params=params, kv_cache=_cached(op, L) * per_token,
                 kv_per_token=per_token)


def _mla_flops(op: OpIn) -> sympy.Expr:
    """MLA's two forms, of which engines run the cheaper (vLLM's MLA backend docstring:
    "compute friendly" for prefill, "data-movement friendly" for decode; SGLang's MHA
    path for prompts):

    - absorbed (decode): kv_b_proj folds into q and the output (`up` per query token),
      then every query scores the latent + rope and sums the latent values, one shared
      576-wide key a head: 2h(rank + rope) + 2h rank per (query, key);
    - materialised (prefill): kv_b_proj expands every key the step reads into per-head K
      and V (`up` per key), then plain attention with nope + rope wide keys and v_dim wide
      values: 2h(nope + rope + v_dim) per (query, key), 3.4x fewer on DeepSeek-V3.

    At T = 1 expanding N keys costs more than it saves, at a long prompt the absorbed
    form's wide keys do, so Min picks decode's and prefill's forms alike. With
    `index_topk` (DeepSeek-V3.2) the selected keys differ by query: the absorbed form only.
    The materialised K and V are the kernel's own traffic and not counted as bytes."""
    h, rank = op.args["heads"], op.args["kv_lora_rank"]
    rope, nope, vd = op.args["rope_dim"], op.args["nope_dim"], op.args["v_dim"]
    up = 2 * h * rank * (nope + vd)  # the latent to K's nope part and to V, per token
    keys = _keys_per_query(op)
    absorbed = op.tokens * (up + (2 * h * (rank + rope) + 2 * h * rank) * keys)
    if _set(op, "index_topk"):
        return absorbed
    expanded = (B * _cached(op, N) + op.tokens) * up  # the cached keys and the new ones
    return Min(absorbed, expanded + op.tokens * 2 * h * (nope + rope + vd) * keys)


# Bytes of one selected-token index (int32) that the indexer writes per query.
INDEX_BYTES = 4


def _indexer(op: OpIn) -> OpOut:
    """DeepSeek-V3.2's lightning indexer: scores every cached token with its own small heads
    over its own key cache (one head_dim key per token, in the op's kv dtype: fp8 there)
    and selects index_topk of them for the attention beside it."""
    h, hd, top_k = op.args["heads"], op.args["head_dim"], op.args["index_topk"]
    _require(op, 0, h * hd, "q must be heads * head_dim wide")
    _require(op, 1, hd, "the indexer key must be head_dim wide")
    per_token = hd * element_bytes(op.dt.kv)
    keys = N + (T + 1) / sympy.Integer(2)  # every cached token, never capped
    # Per (query, key): a head_dim dot product per head (2*h*hd), then ReLU, the head
    # weight and the sum over heads (3*h). The top-k selection is comparisons, not FLOPs.
    cost = Cost(flops=op.tokens * keys * (2 * h * hd + 3 * h),
                act_bytes=_act(op, op.tokens * (h * hd + hd)) + op.tokens * top_k * INDEX_BYTES,
                kv_bytes=B * N * per_token + op.tokens * per_token)
    return OpOut(top_k, cost, kv_cache=L * per_token, kv_per_token=per_token)


# ---- recurrent state -----------------------------------------------------------------

def _state_step(state: sympy.Expr) -> sympy.Expr:
    """Bytes a step moves of a fixed per-sequence state: read once and written once."""
    return 2 * B * state


def _linear_attention(op: OpIn) -> OpOut:
    """Linear attention with a recurrent state (Gated DeltaNet, Mamba-2 SSD): each value
    head holds a key_dim x value_dim state, whatever the context (no KV growth with N)."""
    h, kh = op.args["heads"], op.args["key_heads"]
    dk, dv, chunk = op.args["key_dim"], op.args["value_dim"], op.args["chunk"]
    for i in (0, 1):
        _require(op, i, kh * dk, "q and k must be key_heads * key_dim wide")
    _require(op, 2, h * dv, "v must be heads * value_dim wide")
    state = h * dk * dv * element_bytes(op.dt.kv)
    # Per token and head: decay the state (dk*dv), add k v^T (2*dk*dv), read it out with q
    # (2*dk*dv); the delta rule also reads k^T S before the update (2*dk*dv). A chunked scan
    # (SSD; chunked Gated DeltaNet) adds causal attention inside each chunk of
    # c = min(T, chunk) tokens: (c-1)/2 earlier keys a query, 2*(dk+dv) FLOPs each.
    per_state = 5 + 2 * (1 if _set(op, "delta") else 0)
    intra = (dk + dv) * (sympy.Min(T, chunk) - 1)
    cost = Cost(flops=op.tokens * h * (per_state * dk * dv + intra),
                act_bytes=_act(op, op.tokens * (2 * kh * dk + 2 * h * dv)),
                kv_bytes=_state_step(state))
    return OpOut(h * dv, cost, kv_cache=state)


def _conv1d(op: OpIn) -> OpOut:
    """Short causal depthwise conv over the channels (the input's width): `kernel` taps
    per channel; its state is the last kernel - 1 inputs of each sequence."""
    width, k = op.x.width, op.args["kernel"]
    params, stored = _with_bias(op, width * k, width if _set(op, "bias") else None)
    state = (k - 1) * width * element_bytes(op.dt.kv)
    cost = Cost(flops=2 * op.tokens * width * k,
                weight_bytes=params * element_bytes(op.dt.weights) if stored is None else stored,
                act_bytes=_act(op, 2 * op.tokens * width), kv_bytes=_state_step(state))
    return OpOut(width, cost, params=params, kv_cache=state, param_bytes=stored)


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


def _held(op: OpIn) -> OpOut:
    """Weights held in memory that a plain step does not run (a vision tower, multi-token-
    prediction layers): `params` stored, no FLOPs, bytes or launches. The ops of its body
    are held the same way (compiler/core/elaborate.py), each with its own params."""
    width = op.x.width if op.tensors else sympy.Integer(1)
    return OpOut(width, Cost(kernels=ZERO), params=op.args.get("params", ZERO))


# Facet shorthands: (kernels, parallel, fusion, every_token).
_ELEMENTWISE = dict(kernels=1, parallel="elementwise", fusion="on_chip", every_token=False)


def _ew(arity: int, flops: int, doc: str) -> OpRule:
    """An elementwise kind: `arity` equal-width inputs, `flops` FLOPs per element."""
    return OpRule((arity, arity), _elementwise(flops), **_ELEMENTWISE, doc=doc)


OPS: dict[str, OpRule] = {
    "embed": OpRule((1, 1), _embed, 1, "embed", "on_chip", True, dims=True,
                    doc="row gather: params vocab*d, bytes B*T*d"),
    "linear": OpRule((1, 1), _linear, 1, "linear", "on_chip", False, dims=True,
                     args=("bias", "tied", "softcap"), defaults={"bias": 0, "tied": 0},
                     doc="x @ W: 2*B*T*d_in*d_out FLOPs, weights read once"),
    # Two kernels: the gate GEMM and the top-k/softmax over its logits.
    "router": OpRule((1, 1), _linear, 2, "linear", "on_chip", False, dims=True,
                     args=("bias",), defaults={"bias": 0},
                     doc="MoE gate: a linear (bias=1: plus a bias) and a top-k/softmax kernel"),
    "rmsnorm": OpRule((1, 1), _norm(4, 1), 1, "norm", "on_chip", False, args=("dim",),
                      doc="4 FLOPs/element, d weights"),
    "layernorm": OpRule((1, 1), _norm(7, 2), 1, "norm", "on_chip", False, args=("dim",),
                        doc="7 FLOPs/element, 2d weights"),
    "add": _ew(2, 1, "x + y"),
    "mul": _ew(2, 1, "x * y"),
    "silu_mul": _ew(2, 5, "silu(g) * u: 5 FLOPs/element"),
    "gelu_mul": _ew(2, 9, "gelu(g) * u: 9 FLOPs/element"),
    "silu": _ew(1, 4, "x * sigmoid(x): 4 FLOPs/element"),
    "gelu": _ew(1, 8, "tanh GELU: 8 FLOPs/element"),
    "relu": _ew(1, 1, "max(x, 0)"),
    "sigmoid": _ew(1, 4, "1 / (1 + exp(-x)): 4 FLOPs/element (output gates, Gated "
                         "DeltaNet's beta)"),
    "rope": _ew(1, 3, "rotary embedding: 3 FLOPs/element"),
    "softmax": _ew(1, 5, "exp, sum, divide: 5 FLOPs/element"),
    "attention": OpRule((3, 3), _attention, 1, "attention", "on_chip", True,
                        args=("heads", "kv_heads", "head_dim", "window", "sinks", "softcap",
                              "index_topk"),
                        doc="GQA over B*N cached tokens; writes B*T new ones; "
                            "sinks=1: a learned sink logit per head"),
    "mla": OpRule((2, 2), _mla, 1, "attention", "on_chip", True,
                  args=("heads", "kv_lora_rank", "rope_dim", "nope_dim", "v_dim", "window",
                        "softcap", "index_topk"),
                  doc="latent KV (kv_lora_rank + rope_dim per token), absorbed weights"),
    # Replicated under tp: its key cache is one head_dim vector per token (no heads to
    # split), and engines run it whole beside the split attention.
    "indexer": OpRule((2, 2), _indexer, 1, "replicated", "on_chip", True,
                      args=("heads", "head_dim", "index_topk"),
                      doc="lightning indexer: scores all cached tokens, own key cache"),
    "linear_attention": OpRule((3, 3), _linear_attention, 1, "attention", "on_chip", True,
                               args=("heads", "key_heads", "key_dim", "value_dim", "delta",
                                     "chunk"),
                               defaults={"delta": 0, "chunk": 64},
                               doc="recurrent state heads*key_dim*value_dim per sequence"),
    "conv1d": OpRule((1, 1), _conv1d, 1, "conv1d", "on_chip", True, args=("kernel", "bias"),
                     defaults={"bias": 0},
                     doc="causal depthwise conv, state (kernel-1)*width per sequence"),
    "moe": OpRule((1, 1), _moe, 1, "moe", "on_chip", True, args=("experts", "top_k"),
                  doc="E routed experts, top-k: body costs scaled per routed token"),
    # Replicated under tp: its costs are whatever the spec wrote, for the whole op.
    "custom": OpRule((0, 8), _custom, 1, "replicated", "opaque", False,
                     args=("flops", "weight_bytes", "act_bytes", "kv_bytes", "params", "width",
                           "kv_per_token"),
                     doc="costs written in the spec"),
    # Never runs: no launches; its stated params are held on every GPU (replicated).
    "held": OpRule((0, 1), _held, 0, "replicated", "opaque", False, args=("params",),
                   doc="weights held, not run: params in memory, none in params.total"),
}
OPTIONAL_ARGS = {"window", "sinks", "softcap", "index_topk", "dim", "bias", "tied", "flops", "weight_bytes", "act_bytes", "kv_bytes",
                 "params", "width", "kv_per_token"}
COMMON_KWARGS = ("kernels", "blocks", "weights", "kv", "act", "math", "residual", "biases", "bits",
                 "last_token")
