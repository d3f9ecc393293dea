"""Spread a model over GPUs: tensor (tp), expert (ep), pipeline (pp), data (dp) parallel.

`shard` walks the op graph in order and places every tensor: whole on every GPU of its
group (R), split by width (S: column-parallel outputs, heads) or holding partial sums
(P: row-parallel outputs, vocab-parallel lookups, spread experts). An op of a group the
policy splits over tp is column-parallel on a whole input and row-parallel on a split
one; where a partial sum or a split meets an op that needs the whole tensor, the pass
inserts the collective (all-reduce, all-gather) that makes it whole, once per tensor.
Collectives are counted from the graph, never from a rule of thumb.

Routed experts split `over ep` live on G = max(tp, ep) GPUs (ep groups of whole experts,
each expert split tp/ep ways when ep < tp; when ep > tp the group spans dp replicas, as
attention-data-parallel engines do). Tokens stay replicated and one all-reduce sums the
partial expert outputs (`by all_reduce`), or are sent to their experts and back
(`by all_to_all`: dispatch and combine over the G GPUs, then an all-gather over tp).
A MoE layer's routed experts at ep = 1 and its shared expert, two partial sums added into
one residual, reduce once (`merge_reductions`), as engines run them.

Every cost becomes one GPU's: B is the global batch and each dp replica serves B / dp
sequences; an op's work, weights and KV cache are divided by the GPUs sharing them.
Pipeline stages run one after another for one micro-batch: the step passes every
stage (time as on one stage column) plus pp - 1 hand-offs of the residual stream.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import sympy

from infest.compiler.passes.collectives import Collective, Links, several
from infest.compiler.core.constraints import Constraint
from infest.compiler.core.cost import Cost
from infest.compiler.core.functions import Max, Min
from infest.compiler.core.ops import OPS, PARALLEL_FACETS, element_bytes
from infest.compiler.passes.policy import STANDARD_GROUPS, Policy, unplaced
from infest.compiler.core.symbols import B, PARALLEL, T, sym

if TYPE_CHECKING:
    from infest.compiler.core.graph import CompiledModel, OpNode

TP, EP, PP, DP = (sym(n) for n in PARALLEL)
ONE = sympy.Integer(1)


@dataclass(frozen=True)
class Place:
    """Where a tensor lives: R whole, S split by width, P partial sums over `gpus`."""

    state: str
    gpus: sympy.Expr = ONE
    tokens: sympy.Expr = B * T / DP   # rows each GPU of the group holds


WHOLE = Place("R")


@dataclass(frozen=True)
class Layout:
    """What sharding added: the policy applied and the layout's constraints."""

    policy: str | None
    constraints: tuple[Constraint, ...]
    derived: bool = False   # the policy was derived from group names (none declared)


@dataclass
class _Walk:
    """State of the pass: the placed tensors and the ops written so far."""

    model: "CompiledModel"
    policy: Policy | None
    links: Links
    ops: list["OpNode"] = field(default_factory=list)
    places: dict[str, Place] = field(default_factory=dict)
    alias: dict[str, str] = field(default_factory=dict)   # producer -> op that made it whole
    constraints: dict[tuple, Constraint] = field(default_factory=dict)
    in_body: tuple | None = None                           # the moe body being walked
    body_input: str = ""                                   # the tokens the body reads

    def need(self, c: Constraint) -> None:
        """Record a layout constraint once."""
        self.constraints.setdefault((c.kind, c.lhs, c.rhs, c.what), c)


def shard(model: "CompiledModel", policy: Policy | None, links: Links) -> tuple["CompiledModel", Layout]:
    """The model as one GPU runs it under a policy, with collectives inserted."""
    walk = _Walk(model, policy, links)
    for op in model.ops:
        _visit(op, walk)
    _finish_output(walk)
    _pipeline(walk)
    _global_constraints(walk)
    layout = tuple(walk.constraints.values())
    ops = merge_reductions(walk.ops)
    sharded = replace(model, ops=ops, constraints=[*model.constraints, *layout])
    sharded.__dict__.pop("graph", None)  # a cached graph of the unsharded ops
    return sharded, Layout(policy.name if policy else None, layout,
                           bool(policy and policy.derived))


# ---- placing one op ----------------------------------------------------------------

def _visit(op: "OpNode", w: _Walk) -> None:
    axis = w.policy.split(op.group) if w.policy else None
    if w.policy is not None and unplaced(w.policy, op.group) and op.params != 0:
        _unplaced(op, w)
    if axis == "ep" and (op.experts is not None or op.kind == "moe"):
        _expert_op(op, w)
        return
    w.in_body = None
    rule = PARALLEL_RULES[OPS[op.kind].parallel]  # every kind declares one (core/ops.py)
    rule(op, w, TP if axis == "tp" else None)  # `over ep` outside a moe body: replicated


def _unplaced(op: "OpNode", w: _Walk) -> None:
    """A weight-bearing op of a group no derived rule names: one GPU is fine, tp > 1 needs
    the spec to say how to split it (never a silent replication)."""
    # One check per group (the first weight-bearing op locates it).
    w.need(Constraint("le", TP, ONE, f"tp <= 1 for group '{op.group}': it holds weights and, "
                      "with no policy block in the model, only standard group names are split",
                      op.span,
                      "declare `policy full { split ... over tp }` naming how to split it, or "
                      f"name the group one of {', '.join(STANDARD_GROUPS)}"))


def _inputs(op: "OpNode", w: _Walk) -> list[tuple[str, Place]]:
    return [(p, w.places.get(p, WHOLE)) for p in op.inputs]


def _emit(op: "OpNode", w: _Walk, out: Place, work=ONE, weights=ONE, kv=ONE,
          batch: sympy.Expr = B / DP, cols=ONE) -> None:
    """Write the op as one GPU runs it: work (FLOPs, activations), weights and KV
    divided by the GPUs sharing them, B replaced by the sequences this GPU serves, `cols`
    the share of a GEMM's output columns it computes (a column split; the estimate's
    tiles)."""
    cost = op.cost.scale(flops=work, act_bytes=work, weight_bytes=weights, kv_bytes=kv)
    cost = Cost(*(_expr(v).xreplace({B: batch}) for v in
                  (cost.flops, cost.weight_bytes, cost.act_bytes, cost.kv_bytes, cost.kernels,
                   cost.comm_bytes)))
    inputs = tuple(w.alias.get(p, p) for p in op.inputs)
    w.ops.append(replace(op, cost=cost, inputs=inputs, weight_share=weights, kv_share=kv,
                         cols_share=cols))
    # A last-token op (the LM head) holds one row per sequence: its gather moves B rows.
    w.places[op.name] = replace(out, tokens=batch) if op.last_token else out


def _expr(value: sympy.Expr | int) -> sympy.Expr:
    """A cost field as a sympy expression (Cost.scale leaves plain ints as they are)."""
    return sympy.Integer(value) if isinstance(value, int) else value


def _whole(producer: str, place: Place, w: _Walk) -> Place:
    """Make a split or partial tensor whole (once): all-gather or all-reduce."""
    if place.state == "R":
        return place
    if producer in w.alias:
        return WHOLE
    kind = "all_reduce" if place.state == "P" else "all_gather"
    src = next(o for o in reversed(w.ops) if o.name == producer)
    _collective(w, src, kind, place.gpus, place.tokens * src.width, f"{producer}.{kind}")
    w.alias[producer] = w.ops[-1].name
    w.places[w.ops[-1].name] = WHOLE
    return WHOLE


def _collective(w: _Walk, src: "OpNode", kind: str, gpus: sympy.Expr, elements: sympy.Expr,
                name: str, count: sympy.Expr | None = None, copies: sympy.Expr = ONE) -> None:
    """Append a collective op after `src`: `elements` values of the residual dtype
    (all-reduce) or the activation dtype (everything else) per call; `copies`: of how
    many routed copies of each token the payload is made (a dispatch's top_k)."""
    dtype = src.dtypes.residual if kind == "all_reduce" else src.dtypes.act
    # A held op (weights stored, not run) moves nothing: its collectives are never
    # called (no bytes, no latency, not counted).
    cost = Cost(kernels=sympy.S.Zero) if src.held else \
        Cost(kernels=ONE, comm_bytes=elements * element_bytes(dtype))
    calls = sympy.S.Zero if src.held else (src.count if count is None else count) * several(gpus)
    w.ops.append(replace(src, name=name, kind=kind, count=calls, cost=cost, params=sympy.S.Zero,
                         params_active=sympy.S.Zero, param_bytes=None, kv_cache=sympy.S.Zero,
                         kv_per_token=sympy.S.Zero, inputs=(w.alias.get(src.name, src.name),),
                         args={}, experts=None, comm=Collective(kind, gpus, copies)))
    _need_links(w, kind, gpus, name)


def _need_links(w: _Walk, kind: str, gpus: sympy.Expr, name: str) -> None:
    """A collective needs link fields, and a group past one node needs the network."""
    hw = "add link_bw, link_latency and gpus_per_node to the hardware"
    if not w.links.link:
        w.need(Constraint("le", gpus, ONE, f"{kind} '{name}' over {gpus} GPUs needs links "
                          "(the hardware has no link_bw)", None, hw))
    elif not w.links.net:
        w.need(Constraint("le", gpus, sym("gpus_per_node"),
                          f"the {gpus} GPUs of {kind} '{name}' fit in one node (the hardware "
                          "has no net_bw)", None, "add net_bw and net_latency to the hardware"))


# ---- rules by op kind (tp: the split degree, or None when replicated) -----------------

def _replicated(op: "OpNode", w: _Walk, tp) -> None:
    for p, place in _inputs(op, w):
        _whole(p, place, w)
    _emit(op, w, WHOLE)


def _linear(op: "OpNode", w: _Walk, tp) -> None:
    (p, place), = _inputs(op, w) or [("", WHOLE)]
    if tp is None or place.state == "P" or (place.state == "S" and place.gpus != tp):
        place = _whole(p, place, w) if p else WHOLE
    if tp is None:
        _emit(op, w, WHOLE)
        return
    row = place.state == "S"  # a split input: row-parallel, partial sums out
    _divides(w, op, op.args["d_in" if row else "d_out"], "row" if row else "column")
    _emit(op, w, Place("P" if row else "S", tp), work=1 / tp, weights=1 / tp,
          cols=ONE if row else 1 / tp)


def _embed(op: "OpNode", w: _Walk, tp) -> None:
    # Vocab-parallel: each GPU holds vocab/tp rows and looks up the tokens that fall in
    # them; the others' rows are zeros until an all-reduce sums them.
    if tp is None:
        _emit(op, w, WHOLE)
    else:
        _emit(op, w, Place("P", tp), weights=1 / tp)


def _attention(op: "OpNode", w: _Walk, tp) -> None:
    ins = _inputs(op, w)
    if tp is None:
        _replicated(op, w, None)
        return
    for p, place in ins:
        if place.state == "P" or (place.state == "S" and place.gpus != tp):
            _whole(p, place, w)
    heads = op.args["heads"]
    _divides(w, op, heads, "heads")
    _emit(op, w, Place("S", tp), work=1 / tp, weights=1 / tp, kv=_held_share(op, w, tp))


def _held_share(op: "OpNode", w: _Walk, tp) -> sympy.Expr:
    """Of an attention op's cache one GPU holds: MLA's one latent on every GPU; a
    recurrent state split with its heads (key heads too); else by KV heads."""
    if op.kind == "mla":
        return ONE
    if op.kind == "linear_attention":
        _divides(w, op, op.args["key_heads"], "key heads")
        return 1 / tp
    return _kv_share(op, w, tp)


def _kv_share(op: "OpNode", w: _Walk, tp) -> sympy.Expr:
    """KV heads per GPU stop falling at tp = kv_heads: each is then replicated tp/kv_heads
    times."""
    kv_heads = op.args["kv_heads"]
    w.need(Constraint("whole", Max(tp, kv_heads) / Min(tp, kv_heads), None,
                      f"tp and kv_heads of '{op.name}' divide one another", op.span,
                      "each GPU holds whole KV heads: tp a divisor or multiple of kv_heads"))
    return 1 / Min(tp, kv_heads)


def _norm(op: "OpNode", w: _Walk, tp) -> None:
    (p, place), = _inputs(op, w) or [("", WHOLE)]
    if place.state == "S" and "dim" in op.args:  # per-head norm (QK-norm): stays split
        _emit(op, w, place, work=1 / place.gpus)
        return
    if p:
        _whole(p, place, w)
    _emit(op, w, WHOLE)


def _elementwise(op: "OpNode", w: _Walk, tp) -> None:
    ins = _inputs(op, w)
    states = {(pl.state, pl.gpus) for _, pl in ins}
    if len(states) == 1 and op.kind == "add" and ins[0][1].state == "P":
        _emit(op, w, ins[0][1])  # a sum of partial sums is a partial sum
        return
    places = [_whole(p, pl, w) if pl.state == "P" else pl for p, pl in ins]
    split = {pl.gpus for pl in places if pl.state == "S"}
    if len(split) == 1:  # whole inputs are sliced locally: no communication
        (g,) = split
        _emit(op, w, Place("S", g), work=1 / g)
        return
    for (p, _), pl in zip(ins, places):
        _whole(p, pl, w)
    _emit(op, w, WHOLE)


def _conv1d(op: "OpNode", w: _Walk, tp) -> None:
    """A depthwise conv runs per channel: a split input stays split (weights and state
    split with it, as vLLM shards the Mamba and Gated DeltaNet convs); else replicated."""
    (_, place), = _inputs(op, w)
    if place.state == "S":
        share = 1 / place.gpus
        _emit(op, w, place, work=share, weights=share, kv=share)
        return
    _replicated(op, w, tp)


def _moe(op: "OpNode", w: _Walk, tp) -> None:
    """The container of experts split over tp (or replicated): its output is placed
    like its body's (partial sums when the experts' rows are split)."""
    (h, h_place), (inner, inner_place) = _inputs(op, w)
    _whole(h, h_place, w)
    share = 1 / inner_place.gpus if inner_place.state != "R" else ONE
    _emit(op, w, inner_place, work=share)


# The sharding rule of each `parallel` facet an op kind declares (compiler/core/ops.py).
PARALLEL_RULES = {"linear": _linear, "embed": _embed, "attention": _attention, "norm": _norm,
                  "elementwise": _elementwise, "conv1d": _conv1d, "moe": _moe,
                  "replicated": _replicated}
if set(PARALLEL_RULES) != set(PARALLEL_FACETS):  # a facet without a rule: fail on import
    raise ImportError(f"parallel rules {sorted(PARALLEL_RULES)} != facets {sorted(PARALLEL_FACETS)}")


# ---- routed experts over ep ----------------------------------------------------------

def _expert_gpus() -> sympy.Expr:
    """GPUs one copy of the experts spans: ep groups, each expert split tp/ep ways when
    ep < tp, or ep GPUs across dp replicas when ep > tp."""
    return Max(TP, EP)


def _expert_op(op: "OpNode", w: _Walk) -> None:
    g = _expert_gpus()
    batch = B * g / (TP * DP)  # sequences whose tokens reach one copy of the experts
    mode = w.policy.mode.get(op.group, "all_reduce") if w.policy else "all_reduce"
    if op.kind == "moe":
        _expert_container(op, w, g, batch, mode)
        return
    if w.in_body is None:
        w.body_input = op.inputs[0] if op.inputs else ""
        if mode == "all_to_all":
            _dispatch(op, w, g, batch, op.experts[1], "dispatch")
    w.in_body = op.experts
    # Experts split over more GPUs than ep (g / ep ways; ep = 1: vLLM's TP-sharded experts)
    # split the linears reading the tokens by columns, the others by rows (as _linear).
    column = bool(op.inputs) and op.inputs[0] == w.body_input
    _emit(op, w, WHOLE, work=1 / g, weights=1 / g, batch=batch, cols=EP / g if column else ONE)


def _dispatch(src: "OpNode", w: _Walk, g, batch, top_k, what: str) -> None:
    """All-to-all of each GPU's share of the group's tokens, top_k copies of each; not
    called at ep = 1 (no expert parallelism: every GPU holds a slice of every expert)."""
    width = src.width if what == "combine" else src.args.get("d_in", src.width)
    tokens = batch * T / g
    _collective(w, src, "all_to_all", g, tokens * top_k * width, f"{src.name}.{what}",
                count=src.count * several(EP), copies=top_k)


def _expert_container(op: "OpNode", w: _Walk, g, batch, mode: str) -> None:
    (h, h_place), _ = _inputs(op, w)
    _whole(h, h_place, w)
    experts, top_k = op.args["experts"], op.args["top_k"]
    w.need(Constraint("divides", EP, experts, f"ep divides the experts of '{op.name}'",
                      op.span, "each GPU holds experts / ep whole experts"))
    w.need(Constraint("divides", EP, TP * DP, "ep divides tp x dp", op.span,
                      "expert-parallel GPUs are carved out of a stage's tp x dp GPUs"))
    w.in_body = None
    if mode == "all_reduce":
        _emit(op, w, Place("P", g, batch * T), work=1 / g, batch=batch)
        return
    _emit(op, w, WHOLE, work=1 / g, batch=batch)
    _dispatch(op, w, g, batch, top_k, "combine")
    spread, out = several(EP), B * T / DP * op.width
    # ep > 1: each GPU now holds the outputs of its share of the replica's tokens: gather
    # them over tp. ep = 1 (no expert parallelism, as vLLM runs it): tokens stayed
    # replicated and every expert is split tp ways, so one all-reduce sums the partial
    # outputs instead. Exactly one of the two is called (its count is 0 otherwise).
    _collective(w, op, "all_gather", TP, out, f"{op.name}.all_gather", count=op.count * spread)
    _collective(w, op, "all_reduce", TP, out, f"{op.name}.all_reduce",
                count=op.count * (1 - spread))
    w.alias[op.name] = w.ops[-1].name


# ---- two partial sums into one residual: one all-reduce ----------------------------

def merge_reductions(ops: list["OpNode"]) -> list["OpNode"]:
    """`x + a + b` with a and b partial sums over the same GPUs is `x + all_reduce(a + b)`:
    engines sum a MoE layer's routed and shared experts before their one all-reduce
    (vLLM, SGLang and TensorRT-LLM's DeepSeek, Qwen2-MoE, Llama 4). The walk keeps a
    residual of partial sums partial, but reduces the experts' output inside their
    container (`_expert_container`: at ep = 1 only, a count symbolic in ep, since at ep > 1
    the tokens are gathered instead), so it meets the residual already whole. Here that
    first reduce is dropped where the residual between the two adds feeds nothing else,
    and the second carries the sum (the same bytes a call); its calls cover the first's."""
    by_name = {op.name: op for op in ops}
    readers = Counter(p for op in ops for p in op.inputs)
    dropped: dict[str, str] = {}   # a dropped all-reduce -> the partial sum it reduced
    for op in ops:
        first = _carried_reduce(op, by_name, readers)
        if first is not None and first.name not in dropped:
            dropped[first.name] = first.inputs[0]
    return [replace(op, inputs=tuple(dropped.get(p, p) for p in op.inputs))
            for op in ops if op.name not in dropped]


def _carried_reduce(add: "OpNode", by_name: dict[str, "OpNode"],
                    readers: Counter[str]) -> "OpNode | None":
    """The all-reduce of `x + a` that `add` = (x + a) + all_reduce(b) can carry, if any."""
    if add.kind != "add" or len(add.inputs) != 2:
        return None
    pair = [by_name.get(p) for p in add.inputs]
    for residual, second in (pair, pair[::-1]):
        if residual is None or second is None or residual.kind != "add" \
                or second.kind != "all_reduce" or readers.get(residual.name) != 1:
            continue
        # The residual's own reduce (read by a norm too) stays: only a partial sum added
        # here and nowhere else can ride the second reduce.
        firsts = [by_name[p] for p in residual.inputs if p in by_name
                  and by_name[p].kind == "all_reduce" and readers.get(p) == 1
                  and _same_call(by_name[p], second)]
        if len(firsts) == 1 and residual.count == add.count:
            return firsts[0]
    return None


def _same_call(first: "OpNode", second: "OpNode") -> bool:
    """Two all-reduces over the same GPUs moving the same bytes a call."""
    assert first.comm is not None and second.comm is not None
    return first.comm.gpus == second.comm.gpus and \
        sympy.simplify(first.cost.comm_bytes - second.cost.comm_bytes) == 0


# ---- the model's output, the pipeline and the layout -------------------------------

def _finish_output(w: _Walk) -> None:
    """The step's output (logits) must end whole where the next token is sampled."""
    last = _last_run(w.model.ops)
    _whole(last.name, w.places[last.name], w)


def _last_run(ops: list["OpNode"]) -> "OpNode":
    """The last op a step runs (held weights, which follow the logits, run in none)."""
    return next((op for op in reversed(ops) if not op.held), ops[-1])


def _pipeline(w: _Walk) -> None:
    """pp - 1 hand-offs of the residual stream between consecutive stages."""
    width = w.model.stage_width if w.model.stage_width is not None else \
        _last_run(w.model.ops).width
    last = _last_run(w.ops)
    hand_off = replace(last, group="pipeline", width=width)
    _collective(w, hand_off, "send_recv", TP * PP, B * T / DP * width, "stages.send_recv",
                count=PP - 1)


def _divides(w: _Walk, op: "OpNode", size: sympy.Expr, what: str) -> None:
    w.need(Constraint("divides", TP, size, f"tp divides the {what} of '{op.name}'", op.span,
                      "tensor parallel splits whole heads, columns and rows"))


def _global_constraints(w: _Walk) -> None:
    layers = w.model.layers
    w.need(Constraint("le", PP, layers, "pp <= the model's layers", None,
                      f"the model has {layers} layers to split into stages"))
    w.need(Constraint("divides", DP, B, "dp divides the batch B", None,
                      "each data-parallel replica serves B / dp whole sequences"))
