"""Engine profiles and kernel fusion: how many kernels a step launches, and what each costs.

A spec declares which of its ops an optimizing engine runs as one kernel, in the block
that binds them:

    q = linear(h, hidden -> heads * head_dim)
    k = linear(h, hidden -> kv_heads * head_dim)
    v = linear(h, hidden -> kv_heads * head_dim)
    fuse qkv { q, k, v }

An engine profile (`--engine`) says whether those fusions apply and what one kernel
costs at least. `eager` launches every op (the hardware's `launch_overhead` per kernel);
`graphs` applies the fusions and replays the step as a CUDA graph with ~1.5 us between
kernels. A fused group is one launch, and a tensor that only members of its group
consume stays on chip: its producer does not write it and its consumers do not read it
from HBM. Weights and KV cache are read in full either way. A collective is never part
of a compute kernel: where sharding puts one between two members of a group, the
member after it starts a kernel of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Mapping

import sympy

from infest.dsl import ast
from infest.dsl.errors import Span, did_you_mean, fail

if TYPE_CHECKING:
    from infest.compiler.core.graph import CompiledModel, OpNode
    from infest.compiler.load.hardware import CompiledHardware
    from infest.compiler.core.ops import Tensor


@dataclass(frozen=True)
class Engine:
    """An engine profile: whether declared fusions apply, and the per-kernel floor."""

    name: str
    fused: bool
    launch_overhead: Fraction | None   # seconds per kernel; None keeps the hardware's
    doc: str
    fields: Mapping[str, Fraction] = field(default_factory=dict)  # estimate parameters


ENGINES = {
    "eager": Engine("eager", False, None,
                    "every op its own kernel, launched one by one (the hardware's "
                    "launch_overhead, 4 us on the shipped GPUs)"),
    # 1.5 us: the middle of the 1-2 us per kernel that fused engines replaying CUDA
    # graphs leave between kernels (README, "Engines"); --set launch_overhead= calibrates.
    "graphs": Engine("graphs", True, Fraction(3, 2_000_000),
                     "the spec's fusions applied, the step replayed as a CUDA graph, "
                     "1.5 us per kernel"),
}
DEFAULT_ENGINE = "eager"


def _shipped_profiles() -> dict[str, Engine]:
    """The engines shipped as data (specs/engines/*.json: vllm, sglang, trtllm, ...)."""
    from infest.compiler.load.engine_profiles import load_profiles
    return {p.name: Engine(p.name, p.fused, p.launch_overhead, p.doc, dict(p.fields))
            for p in load_profiles().values()}


ENGINES.update(_shipped_profiles())


@dataclass(frozen=True)
class Fusion:
    """A checked `fuse` group: op names in elaboration order (one launch together)."""

    name: str
    ops: tuple[str, ...]
    span: Span


def resolve_engine(name: str | None) -> Engine:
    """The named engine profile (default eager); an unknown name is an error."""
    name = DEFAULT_ENGINE if name is None else name
    if name not in ENGINES:
        raise fail(None, f"--engine {name}: no such engine profile",
                   did_you_mean(name, ENGINES) or f"engines: {', '.join(ENGINES)}")
    return ENGINES[name]


def engine_hardware(hardware: "CompiledHardware | None", engine: Engine) -> "CompiledHardware | None":
    """The hardware with the engine's per-kernel floor as its launch_overhead, and the
    engine's estimate parameters where the hardware file does not set its own."""
    if hardware is None or (engine.launch_overhead is None and not engine.fields):
        return hardware
    from infest.compiler.load.hardware import HwValue, expected_dimension
    fields = dict(hardware.fields)
    if engine.launch_overhead is not None:
        fields["launch_overhead"] = replace(fields["launch_overhead"], value=engine.launch_overhead)
    for name, value in engine.fields.items():
        if name not in hardware.fields:
            fields[name] = HwValue(value, expected_dimension(name), hardware.span)
    return replace(hardware, fields=fields)


# ---- declaring a fusion (elaboration) ------------------------------------------------

def fusion_of(stmt: ast.FuseDef, tensors: Mapping[str, "Tensor"],
              nodes: Mapping[str, "OpNode"], fused: dict[str, Span],
              position: Mapping[str, int]) -> Fusion:
    """Resolve a `fuse` statement against the bindings made so far (ops and their
    places in elaboration order); record its ops."""
    ops: list[str] = []
    for ref in stmt.members:
        op = _member(ref, tensors, nodes)
        if op in ops:
            raise fail(ref.span, f"'{ref}' is named twice in fuse '{stmt.name}'")
        if op in fused:
            raise fail(ref.span, f"op '{op}' is already fused", f"first at {fused[op]}")
        ops.append(op)
    if len(ops) < 2:
        raise fail(stmt.span, f"fuse '{stmt.name}' names one op", "a fusion joins two ops or more")
    _same_count(stmt, ops, nodes)
    fused.update({op: stmt.span for op in ops})
    return Fusion(stmt.name, tuple(sorted(ops, key=position.__getitem__)), stmt.span)


def _member(ref: ast.FuseRef, tensors: Mapping[str, "Tensor"], nodes: Mapping[str, "OpNode"]) -> str:
    tensor = tensors.get(ref.binding)
    if tensor is None or not tensor.ops:
        raise fail(ref.span, f"'{ref.binding}' is not an op bound before this fuse",
                   "name op bindings of this block written above it (fuse a layer's "
                   "ops inside the layer)")
    if ref.kind is None:
        return tensor.producer  # type: ignore[return-value]
    nested = [op for op in tensor.ops if op != tensor.producer and nodes[op].kind == ref.kind]
    if len(nested) != 1:
        kinds = sorted({nodes[op].kind for op in tensor.ops if op != tensor.producer})
        what = "no" if not nested else "more than one"
        raise fail(ref.span, f"binding '{ref.binding}' has {what} nested '{ref.kind}' op",
                   f"nested ops: {', '.join(kinds)}" if kinds else "it nests no op call")
    return nested[0]


def _same_count(stmt: ast.FuseDef, ops: list[str], nodes: Mapping[str, "OpNode"]) -> None:
    """One kernel runs once per instance: every member must run as often as the first."""
    first = nodes[ops[0]]
    for op in ops[1:]:
        if sympy.simplify(nodes[op].count - first.count) != 0:
            raise fail(stmt.span, f"fuse '{stmt.name}' joins ops that run a different number "
                       f"of times: '{first.name}' x {first.count}, '{op}' x {nodes[op].count}",
                       "fuse ops of the same block")


# ---- applying fusions (a fusing engine) ------------------------------------------------

def fuse(model: "CompiledModel") -> "CompiledModel":
    """The model as a fusing engine runs it (before sharding): one launch per group,
    intermediates kept on chip."""
    group = {op: i for i, f in enumerate(model.fusions) for op in f.ops}
    consumers: dict[str, list["OpNode"]] = {}
    for op in model.ops:
        for producer in op.inputs:
            consumers.setdefault(producer, []).append(op)
    saved = _saved_bytes(model.ops, group, consumers)
    leaders = {f.ops[0] for f in model.fusions}
    ops = [op if op.name not in group else
           replace(op, cost=op.cost.replace(act_bytes=op.cost.act_bytes - saved.get(op.name, 0),
                                            kernels=sympy.Integer(int(op.name in leaders))))
           for op in model.ops]
    return replace(model, ops=ops)


def _saved_bytes(ops: list["OpNode"], group: dict[str, int],
                 consumers: dict[str, list["OpNode"]]) -> dict[str, sympy.Expr]:
    """Activation bytes each member no longer moves: a tensor whose every consumer is in
    its producer's group is neither written nor read back (ops whose fusion facet is
    "opaque", compiler/core/ops.py: `custom`, whose bytes are the spec's own, never take part)."""
    from infest.compiler.core.ops import OPS
    saved: dict[str, sympy.Expr] = {}

    def opaque(o: "OpNode") -> bool:
        return OPS[o.kind].fusion == "opaque"
    for op in ops:
        users = consumers.get(op.name, [])
        if op.name not in group or opaque(op) or not users or any(
                group.get(u.name) != group[op.name] or opaque(u) for u in users):
            continue
        saved[op.name] = saved.get(op.name, 0) + _tensor_bytes(op, op)
        for user in {u.name: u for u in users}.values():
            saved[user.name] = saved.get(user.name, 0) + _tensor_bytes(op, user)
    return saved


def _tensor_bytes(producer: "OpNode", mover: "OpNode") -> sympy.Expr:
    """Bytes `mover` moves of `producer`'s output: B*T rows at its activation dtype, k
    times inside a moe body (each token visits k experts)."""
    from infest.compiler.core.ops import element_bytes
    from infest.compiler.core.symbols import B, T
    routed = mover.experts[1] if mover.experts is not None else 1
    return B * T * producer.width * element_bytes(mover.dtypes.act) * routed


def split_at_collectives(model: "CompiledModel") -> "CompiledModel":
    """After sharding: a member fed by a collective that a member of its own group
    started begins a new kernel whenever that collective runs (on several GPUs; a
    collective is never inside a compute kernel)."""
    from infest.compiler.passes.collectives import several
    group = {op: i for i, f in enumerate(model.fusions) for op in f.ops}
    by_name = {op.name: op for op in model.ops}

    def launches(op: "OpNode") -> sympy.Expr:
        cuts = [several(by_name[p].comm.gpus) for p in op.inputs
                if p in by_name and by_name[p].comm is not None
                and any(group.get(src) == group[op.name] for src in by_name[p].inputs)]
        return sympy.Max(*cuts) if cuts else sympy.Integer(0)

    ops = [replace(op, cost=op.cost.replace(kernels=launches(op)))
           if op.comm is None and op.name in group and op.cost.kernels == 0 else op
           for op in model.ops]
    return replace(model, ops=ops)
