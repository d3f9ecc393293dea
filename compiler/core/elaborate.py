"""Check a model's AST and build its op graph: one networkx node per op.

Statements run in order; a name bound to an op is a tensor [B*T, width]. `repeat`
multiplies the count of its body (never unrolls it); `moe` scales its body per routed
token; `held` keeps its body's weights in memory without running them in a step.
Groups and dtypes declared in a block hold for the rest of that block.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction

import sympy

from infest.dsl import ast
from infest.dsl.errors import Collector, SpecError, Span, did_you_mean, fail
from infest.compiler.core.constraints import Constraint, dedupe
from infest.compiler.core.cost import Cost
from infest.compiler.core.graph import CompiledModel, OpNode
from infest.compiler.core.keys import TRAINED_CONTEXT
from infest.compiler.core.dtypes import (DTYPES, ROLES, DType, bits_dtype, declared_dtype,
                                         dtype_named, math_peak)
from infest.compiler.passes.engine import Fusion, fusion_of
from infest.compiler.core.exprs import LIMIT, contains_op_call, to_sympy
from infest.compiler.core.ops import (COMMON_KWARGS, KV_ELEM, KV_ELEM_NAME, OPS,
                                      OPTIONAL_ARGS, DTypes, OpIn, OpRule, ShapeMismatch, Tensor,
                                      touched_experts)
from infest.compiler.core.params import Param, defaults_of, resolve_params
from infest.compiler.core.symbols import B, BUILTINS, N, T, sym

_MAX_DIM = 2**53
# Ops of one model (after layer calls expand; `repeat` never unrolls): elaborating and
# deriving forms costs about 1 ms per op, so 4,000 keep a job within a few seconds (the
# largest shipped or imported spec has a few hundred). Layers that call each other twice
# per level would otherwise build 2^depth ops.
MAX_OPS = 4_000


@dataclass
class _Scope:
    """Per-block state: current group, dtypes, repeat count, MoE routing."""

    group: str
    dtypes: dict[str, DType]
    count: sympy.Expr
    experts: tuple[sympy.Expr, sympy.Expr] | None = None
    prefix: str = ""  # op names inside a layer call: "decoder.q"
    held: str = ""    # inside a `held` block: its group (ops stored, not run)

    def child(self, **changes: object) -> "_Scope":
        return replace(self, dtypes=dict(self.dtypes), **changes)


@dataclass
class _State:
    params: dict[str, Param]
    defaults: dict[sympy.Symbol, sympy.Expr]
    tensors: dict[str, Tensor] = field(default_factory=dict)
    nodes: dict[str, OpNode] = field(default_factory=dict)  # in elaboration order
    later: dict[str, Span] = field(default_factory=dict)  # every op binding, for hints
    poisoned: set[str] = field(default_factory=set)  # bindings that failed: no cascades
    errors: Collector = field(default_factory=Collector)
    layers: dict[str, ast.LayerDef] = field(default_factory=dict)
    locals: dict[str, sympy.Expr] = field(default_factory=dict)  # a layer's number args
    calling: list[str] = field(default_factory=list)  # layers being expanded (no recursion)
    policies: dict[str, ast.PolicyDef] = field(default_factory=dict)
    layer_counts: list[sympy.Expr] = field(default_factory=list)  # top-level repeat counts
    last: Tensor | None = None  # the most recent top-level binding
    stage_width: sympy.Expr | None = None
    call_spans: list[Span] = field(default_factory=list)  # their call sites, innermost last
    suffixes: dict[str, int] = field(default_factory=dict)  # next free "#i" per op name
    constraints: list[Constraint] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # state.nodes' keys, for slicing
    index: dict[str, int] = field(default_factory=dict)  # op -> its place in order
    fusions: list[Fusion] = field(default_factory=list)
    fused: dict[str, Span] = field(default_factory=dict)  # op -> the fuse that holds it


class _TooManyOps(SpecError):
    """The op limit was hit: stop elaborating at once (errors are not collected)."""


def elaborate(model: ast.Model, file: str, reserved: set[str]) -> CompiledModel:
    """Check a model and build its graph; all semantic errors are reported together."""
    param_stmts = [s for s in model.body if isinstance(s, ast.Assign) and s.body is None
                   and not contains_op_call(s.value)]
    params = resolve_params(param_stmts, reserved)
    state = _State(params, defaults_of(params))
    state.tensors["tokens"] = Tensor(sympy.Integer(1), None)
    state.layers = _collect_layers(model.body, state)
    _collect_bindings(model.body, state)
    scope = _Scope("other", {r: DTYPES["bf16"] for r in ("weights", "kv", "act")}, sympy.Integer(1))
    _run_block(model.body, scope, state, top=True)
    state.errors.raise_if_any()
    _require_param_limits(state)
    return _finish(model, file, state, scope)


def _finish(model: ast.Model, file: str, state: _State, scope: _Scope) -> CompiledModel:
    if not state.nodes:
        raise fail(model.name_span, f"model '{model.name}' has no ops",
                   "add ops such as `x = embed(tokens, vocab -> hidden)`")
    _check_policies(state)
    _require_trained_context(state)
    state.errors.raise_if_any()
    _kv_elem_input(model, state)
    return CompiledModel(model.name, model.title, file, state.params,
                         list(state.nodes.values()), _dtypes_of(scope, {}),
                         policies=state.policies, constraints=dedupe(state.constraints),
                         layers=sympy.Add(*state.layer_counts) if state.layer_counts
                         else sympy.Integer(1), stage_width=state.stage_width,
                         fusions=tuple(state.fusions))


def _require(state: _State, kind: str, lhs: sympy.Expr, what: str, span: Span | None,
             rhs: sympy.Expr | None = None, hint: str | None = None) -> None:
    """Record a condition to re-check at evaluated inputs, if it depends on any."""
    if lhs.free_symbols or (rhs is not None and rhs.free_symbols):
        state.constraints.append(Constraint(kind, lhs, rhs, what, span, hint))


def _kv_elem_input(model: ast.Model, state: _State) -> None:
    """Bytes per KV element as the input `kv_bytes_per_elem` (default: the kv dtype) when
    every cache holds one dtype, so `--set kv_bytes_per_elem=1` is the fp8 cache; a spec
    whose caches mix dtypes keeps each op's own bytes. A spec's own param of that name wins."""
    cached = [n for n in state.nodes.values() if KV_ELEM in n.kv_per_token.free_symbols]
    kinds = {n.dtypes.kv.bytes for n in cached}
    if not cached or KV_ELEM_NAME in state.params:
        return
    if len(kinds) == 1:
        state.params[KV_ELEM_NAME] = Param(KV_ELEM_NAME, KV_ELEM, kinds.pop(), None, model.name_span)
        return
    for n in cached:
        state.nodes[n.name] = _with_kv_bytes(n, sympy.Rational(n.dtypes.kv.bytes.numerator,
                                                                n.dtypes.kv.bytes.denominator))


def _with_kv_bytes(node: OpNode, elem: sympy.Expr) -> OpNode:
    """The node with its own KV bytes per element in place of the input."""
    swap = {KV_ELEM: elem}
    cost = replace(node.cost, kv_bytes=node.cost.kv_bytes.xreplace(swap))
    return replace(node, cost=cost, kv_cache=node.kv_cache.xreplace(swap),
                   kv_per_token=node.kv_per_token.xreplace(swap))


def _require_trained_context(state: _State) -> None:
    """N + T tokens (a prompt of N in prefill) must stay within the trained context."""
    param = state.params.get(TRAINED_CONTEXT)
    if param is None:
        return
    _require(state, "whole", param.expr, TRAINED_CONTEXT, param.span)
    _require(state, "le", N + T, f"context N + T <= {TRAINED_CONTEXT}", param.span,
             param.expr, "the model was trained for that many tokens; --set "
             f"{TRAINED_CONTEXT}=... asks what if (e.g. a longer rope scaling)")


def _require_param_limits(state: _State) -> None:
    """Derived params must stay within the 1e30 value limit at any inputs, too."""
    for p in state.params.values():
        if not p.is_input:
            _require(state, "le", sympy.Abs(p.expr), f"param '{p.name}' <= 1e30", p.span,
                     LIMIT, "values must stay below 1e30")


def _collect_bindings(body: tuple, state: _State) -> None:
    """Remember where every op binding is, to explain a use before definition."""
    for stmt in body:
        if isinstance(stmt, ast.Assign) and (stmt.body is not None or contains_op_call(stmt.value)):
            state.later.setdefault(stmt.target, stmt.target_span)
            _collect_bindings(stmt.body or (), state)
        elif isinstance(stmt, ast.Repeat):
            _collect_bindings(stmt.body, state)


def _run_block(body: tuple, scope: _Scope, state: _State, top: bool = False) -> Tensor | None:
    """Elaborate statements in order; return the last tensor bound in the block."""
    last: Tensor | None = None
    for stmt in body:
        try:
            last = _run_stmt(stmt, scope, state, top) or last
        except _TooManyOps:
            raise
        except (SpecError, _Poisoned) as exc:
            if isinstance(exc, SpecError):
                state.errors.add(exc)
            if isinstance(stmt, ast.Assign):
                state.poisoned.add(stmt.target)  # its users would only repeat this error
    return last


class _Poisoned(Exception):
    """An op consumed the output of an op that already failed: say nothing more."""


def _run_stmt(stmt: ast.Stmt, scope: _Scope, state: _State, top: bool) -> Tensor | None:
    if isinstance(stmt, ast.FuseDef):
        if scope.held:
            return None  # held ops launch no kernel: nothing to fuse
        state.fusions.append(fusion_of(stmt, state.tensors, state.nodes, state.fused,
                                     state.index))
    elif isinstance(stmt, (ast.LayerDef, ast.PolicyDef)):
        what = "layers" if isinstance(stmt, ast.LayerDef) else "policies"
        if not top:
            raise fail(stmt.span, f"{what} are defined at the top level of a model")
        if isinstance(stmt, ast.PolicyDef):
            _add_policy(stmt, state)
    elif isinstance(stmt, ast.GroupStmt):
        scope.group = stmt.name
    elif isinstance(stmt, ast.DtypeDecl):
        scope.dtypes[stmt.role] = declared_dtype(stmt)
    elif isinstance(stmt, ast.Repeat):
        count = _positive_int(stmt.count, state, "repeat count")
        if top:
            _enter_layers(count, state)
        inner = scope.child(count=scope.count * count, group=stmt.group or scope.group)
        _run_block(stmt.body, inner, state)
    elif stmt.body is None and not contains_op_call(stmt.value):
        if not top:
            raise fail(stmt.span, "params are declared at the top level of a model",
                       "move this line out of the block, or bind an op here")
    else:
        if stmt.group:
            scope.group = stmt.group
        tensor = _bind(stmt, scope, state)
        if top:
            state.last = tensor
        return tensor
    return None


def _add_policy(stmt: ast.PolicyDef, state: _State) -> None:
    if stmt.name in state.policies:
        first = state.policies[stmt.name].name_span
        raise fail(stmt.name_span, f"policy '{stmt.name}' is defined twice", f"first at {first}")
    state.policies[stmt.name] = stmt


def _check_policies(state: _State) -> None:
    """Policies name groups; check them once every op (and so every group) is known."""
    from infest.compiler.passes.policy import policy_errors
    for err in policy_errors(state.policies.values(), list(state.nodes.values())):
        state.errors.add(err)


def _enter_layers(count: sympy.Expr, state: _State) -> None:
    """A top-level repeat holds layers a pipeline can split; the residual entering the
    first one is what pipeline stages hand each other."""
    state.layer_counts.append(count)
    if state.stage_width is None and state.last is not None:
        state.stage_width = state.last.width


# ---- ops -------------------------------------------------------------------------

def _bind(stmt: ast.Assign, scope: _Scope, state: _State) -> Tensor:
    if isinstance(stmt.value, ast.Call) and stmt.value.func in state.layers:
        if stmt.body is not None:
            raise fail(stmt.value.span, "a layer call takes no body")
        # A layer call's binding names no op of this block (`fuse` looks inside layers).
        state.tensors[stmt.target] = replace(_call_layer(stmt.value, scope, state), ops=())
        return state.tensors[stmt.target]
    if not isinstance(stmt.value, ast.Call) or stmt.value.func not in OPS:
        where = stmt.value.span
        func = stmt.value.func if isinstance(stmt.value, ast.Call) else None
        if func is not None:
            known = list(OPS) + list(state.layers)
            hint = did_you_mean(func, known) or f"ops: {', '.join(sorted(OPS))}"
            raise fail(stmt.value.func_span, f"unknown op '{func}'", hint)
        raise fail(where, "an op binding must be a single op call", "e.g. `x = add(x, o)`")
    if stmt.target in state.params:
        raise fail(stmt.target_span, f"'{stmt.target}' is a param and cannot name a tensor")
    first = len(state.order)
    tensor = _op(stmt.value, stmt.target, scope, state, stmt.body)
    tensor = replace(tensor, ops=tuple(state.order[first:]))  # for `fuse`
    state.tensors[stmt.target] = tensor
    return tensor


def _op(call: ast.Call, binding: str, scope: _Scope, state: _State,
        body: tuple | None = None) -> Tensor:
    """Elaborate one op call (and any nested op calls among its arguments)."""
    _check_op_limit(call, state)
    rule = OPS[call.func]
    tensors, dims, args, common = _split_args(call, rule, binding, scope, state)
    inner_last = _held_body(call, body, scope, state) if call.func == "held" else \
        _moe_body(call, args, body, scope, state)
    if inner_last is not None:
        tensors = tensors[:1] + [inner_last]
    dtypes = _dtypes_of(scope, common)
    last = _last_token(call, tensors, common)
    op_in = OpIn(tuple(tensors), dims, args, dtypes, lambda a, b: _equal(a, b, state), last)
    try:
        out = rule.rule(op_in)
    except ShapeMismatch as mm:
        raise _shape_error(call, binding, tensors, mm, state) from None
    shape = dict(zip(("d_in", "d_out"), dims)) if dims else {}
    return _add_node(call, binding, scope, state, tensors, out, dtypes, common,
                     {**args, **shape}, last)


def _last_token(call: ast.Call, tensors: list[Tensor], common: dict) -> bool:
    """Whether an op runs on each sequence's last position only: flagged `last_token=1`,
    or fed only by such ops (a softmax over the logits)."""
    flagged = bool(common.get("last_token", 0))
    last = flagged or bool(tensors) and all(t.last_token for t in tensors)
    if last and OPS[call.func].every_token:
        why = "is flagged last_token=1" if flagged else "reads only last-token rows"
        raise fail(call.span, f"{call.func}() {why}, but it needs every new token",
                   "last_token=1 is for the ops after the final norm that only feed the "
                   "logits (the LM head); embed, attention, mla, the indexer, recurrent "
                   "state ops and moe see every token")
    return last


def _split_args(call: ast.Call, rule: OpRule, binding: str, scope: _Scope, state: _State):
    tensors: list[Tensor] = []
    numbers: list[tuple[ast.Expr, sympy.Expr]] = []
    dims = None
    named: dict[str, tuple[ast.KwArg, object]] = {}
    for arg in call.args:
        if isinstance(arg, ast.DimsArg):
            dims = (_dimension(arg.d_in, state), _dimension(arg.d_out, state))
        elif isinstance(arg, ast.KwArg):
            named[arg.name] = (arg, arg.value)
        elif _is_tensor(arg.value, state):
            tensors.append(_tensor(arg.value, binding, scope, state))
        else:
            numbers.append((arg.value, _number(arg.value, state)))
    _check_arity(call, rule, len(tensors), dims)
    args, common = _named_args(call, rule, numbers, named, state)
    return tensors, dims, args, common


def _is_tensor(node: ast.Expr, state: _State) -> bool:
    if isinstance(node, ast.Call):
        return node.func in OPS or node.func in state.layers
    if isinstance(node, ast.Name):
        return node.id in state.tensors or node.id in state.poisoned or (
            node.id not in state.params and node.id in state.later)
    return False


def _tensor(node: ast.Expr, binding: str, scope: _Scope, state: _State) -> Tensor:
    if isinstance(node, ast.Call) and node.func in state.layers:
        return _call_layer(node, scope, state)
    if isinstance(node, ast.Call):
        return _op(node, f"{binding}.{node.func}", scope, state)
    assert isinstance(node, ast.Name)
    if node.id in state.poisoned:
        raise _Poisoned(node.id)
    if node.id not in state.tensors and state.calling:
        raise fail(node.span, f"'{node.id}' is not visible inside layer '{state.calling[-1]}'",
                   "a layer sees only its arguments and `tokens`: pass it in")
    if node.id not in state.tensors:
        raise fail(node.span, f"'{node.id}' is used before it is defined",
                   f"it is bound at {state.later[node.id]}; an op cannot consume a later "
                   "op's output (that would be a cycle)")
    return state.tensors[node.id]


def _check_arity(call: ast.Call, rule: OpRule, n_tensors: int, dims: object) -> None:
    lo, hi = rule.tensors
    if not lo <= n_tensors <= hi:
        want = f"{lo}" if lo == hi else f"{lo} to {hi}"
        raise fail(call.span, f"{call.func}() takes {want} tensor input(s), got {n_tensors}")
    if rule.dims and dims is None:
        raise fail(call.span, f"{call.func}() needs its dimensions as `d_in -> d_out`")
    if not rule.dims and dims is not None:
        raise fail(call.span, f"{call.func}() takes no `d_in -> d_out`")


def _named_args(call, rule, numbers, named, state):
    """Positional numbers and keywords -> {arg: value}; dtype/kernel keywords apart."""
    if len(numbers) > len(rule.args):
        raise fail(numbers[len(rule.args)][0].span, f"too many arguments to {call.func}()")
    args = {name: value for name, (_, value) in zip(rule.args, numbers)}
    common: dict[str, object] = {}
    for name, (kw, node) in named.items():
        if name in COMMON_KWARGS:
            common[name] = _common_kwarg(kw, state)
        elif name in rule.args:
            args[name] = _number(node, state)
        else:
            allowed = list(rule.args) + list(COMMON_KWARGS)
            hint = did_you_mean(name, rule.args) or did_you_mean(name, COMMON_KWARGS)
            raise fail(kw.span, f"{call.func}() has no argument '{name}'",
                       hint or f"arguments: {', '.join(allowed)}")
    _check_positive_args(call, args, numbers, named, state)
    for name in rule.args:
        if name not in args and name in rule.defaults:
            args[name] = sympy.Integer(rule.defaults[name])
        elif name not in args and name not in OPTIONAL_ARGS:
            raise fail(call.span, f"{call.func}() is missing its argument '{name}'",
                       f"arguments in order: {', '.join(rule.args)}")
    return args, common


_FLAGS = ("bias", "tied", "sinks", "delta")  # 0 or 1
# window = 0: full attention; index_topk = 0: dense attention; softcap = 0: no capping.
_MAY_BE_ZERO = _FLAGS + ("window", "index_topk", "softcap")
_WHOLE = ("window", "index_topk", "kernel", "chunk")  # counts of tokens or taps
_CUSTOM_POSITIVE = ("width",)  # custom()'s other arguments are costs: 0 or more


def _check_positive_args(call, args, numbers, named, state) -> None:
    """Op arguments such as heads must be positive numbers at the defaults (flags and a
    window may be 0, custom costs too), and stay so at any evaluated inputs."""
    nodes = dict(zip(OPS[call.func].args, (n for n, _ in numbers)))
    nodes.update({k: kw.value for k, (kw, _) in named.items()})
    for name, value in args.items():
        zero_ok = name in _MAY_BE_ZERO or (call.func == "custom" and name not in _CUSTOM_POSITIVE)
        what = f"{call.func}() argument '{name}'"
        _require(state, "nonnegative" if zero_ok else "positive", value, what, nodes[name].span)
        if name in _WHOLE:
            _require(state, "whole", value, what, nodes[name].span)
        at = _at_defaults(value, state).subs({B: 1, T: 1, N: 1})
        if not at.is_number:
            continue
        if at.has(sympy.zoo, sympy.oo, -sympy.oo, sympy.nan) or not at.is_extended_real:
            raise fail(nodes[name].span, f"{what} is not a finite real number at the defaults "
                       "(B = T = N = 1)", "a division by zero, or the root of a negative?")
        if at < 0 or (at == 0 and not zero_ok):
            zero = " (or 0)" if zero_ok else ""
            raise fail(nodes[name].span, f"{what} must be positive{zero}")
        if name in _WHOLE and not at.is_integer:
            raise fail(nodes[name].span, f"{what} must be a whole number")


def _common_kwarg(kw: ast.KwArg, state: _State) -> object:
    if kw.name == "kernels":
        value = _number(kw.value, state)
        at = _at_defaults(value, state)
        if not at >= 0 or (at.is_number and not at.is_integer):
            raise fail(kw.value.span, "kernels must be a whole number, 0 or more")
        _require(state, "nonnegative", value, "kernels", kw.value.span)
        _require(state, "whole", value, "kernels", kw.value.span)
        return value
    if kw.name == "blocks":  # thread blocks per launch (occupancy in `infest diagnose`)
        value = _number(kw.value, state)
        if not _at_defaults(value, state).subs({B: 1, N: 1, T: 1}) >= 1:
            raise fail(kw.value.span, "blocks must be 1 or more")
        return value
    if kw.name == "last_token":  # a flag, like bias= and tied=
        if not (isinstance(kw.value, ast.Num) and kw.value.value in (0, 1)):
            raise fail(kw.value.span, "last_token= takes 0 or 1")
        return int(kw.value.value)
    if kw.name == "bits":
        value = _at_defaults(_number(kw.value, state), state)
        if not value.is_Rational:
            raise fail(kw.value.span, "bits= takes a number such as 4.25")
        return bits_dtype(Fraction(int(value.p), int(value.q)), kw.value.span)
    if not isinstance(kw.value, ast.Name):
        raise fail(kw.value.span, f"{kw.name}= takes a dtype name such as bf16")
    return dtype_named(kw.value.id, kw.value.span)


def _dtypes_of(scope: _Scope, common: dict) -> DTypes:
    d = dict(scope.dtypes)
    d.update({r: common[r] for r in ROLES if r in common})
    if "bits" in common:
        d["weights"] = common["bits"]
    act = d["act"]
    # Biases follow the weights unless stated (`biases: bf16` beside mxfp4 experts).
    return DTypes(d["weights"], d["kv"], act, d.get("math", act), d.get("residual", act),
                  d.get("biases", d["weights"]))


def _moe_body(call, args, body, scope, state) -> Tensor | None:
    """Elaborate a moe block's expert body with routing scale; return its output."""
    if call.func != "moe":
        if body is not None:
            raise fail(call.span, f"{call.func}() takes no body",
                       "only moe(...) { } and held(...) { } have one")
        return None
    if body is None:
        raise fail(call.span, "moe() needs a body: the ops of one expert in { }")
    if scope.experts is not None:
        raise fail(call.span, "moe blocks cannot be nested")
    experts, top_k = args["experts"], args["top_k"]
    if not _at_defaults(top_k, state) <= _at_defaults(experts, state):
        raise fail(call.span, "top_k cannot exceed experts")
    _require(state, "le", top_k, "top_k <= experts", call.span, experts,
             "top_k cannot exceed experts")
    inner = scope.child(experts=(experts, top_k))
    last = _run_block(body, inner, state)
    if last is None:
        raise fail(call.span, "the moe body binds no op")
    return last


def _held_body(call, body, scope, state) -> None:
    """Elaborate a `held` block's body: its ops are stored under the block's group and
    never run (compiler/core/ops.py `held`); the block's output is its input."""
    if body is not None:
        _run_block(body, scope.child(held=scope.held or scope.group), state)
    return None


def _add_node(call, binding, scope, state, tensors, out, dtypes, common, args,
              last: bool) -> Tensor:
    _check_op_limit(call, state)
    name = _unique(scope.prefix + binding, state)
    stored = out.param_bytes
    cost, params, active = _routed(out.cost, out.params, scope)
    # The kind's kernel count (ops.py), unless the spec states its own.
    cost = cost.replace(kernels=common.get("kernels", sympy.Integer(OPS[call.func].kernels)))
    held = scope.held or (scope.group if call.func == "held" else "")
    if held:  # stored, not run: no cost, no launches, no KV cache, nothing active
        cost, active, out = Cost(kernels=sympy.Integer(0)), sympy.Integer(0), \
            replace(out, kv_cache=sympy.Integer(0), kv_per_token=sympy.Integer(0))
    if stored is not None and scope.experts is not None:
        stored = stored * scope.experts[0]  # every expert stored, like params
    node = OpNode(name, call.func, scope.group, scope.count, cost, params, active,
                  out.kv_cache, out.kv_per_token, math_peak(dtypes.math, dtypes.act),
                  out.width, dtypes, tuple(t.producer for t in tensors if t.producer),
                  call.span, args=args, experts=scope.experts,
                  blocks=common.get("blocks"), last_token=last, param_bytes=stored,
                  held=held)
    state.nodes[name] = node
    state.index[name] = len(state.order)
    state.order.append(name)
    return Tensor(out.width, name, last)


def _routed(cost: Cost, params: sympy.Expr, scope: _Scope):
    """Scale an expert-body op: FLOPs per routed token, weights by experts touched."""
    if scope.experts is None:
        return cost, params, params
    experts, k = scope.experts
    touched = touched_experts(experts, k, B * T)
    scaled = cost.scale(flops=k, act_bytes=k, kv_bytes=k, weight_bytes=touched)
    return scaled, params * experts, params * k


def _check_op_limit(call: ast.Call, state: _State) -> None:
    """Stop before the graph passes MAX_OPS ops, at the innermost layer call."""
    if len(state.nodes) < MAX_OPS:
        return
    chain = " -> ".join(state.calling)
    where = f" while expanding layer {chain}" if chain else ""
    span = state.call_spans[-1] if state.call_spans else call.span
    diag = fail(span, f"the model has more than {MAX_OPS:,} ops (MAX_OPS){where}",
                "layers that call other layers several times multiply; use `repeat`")
    raise _TooManyOps(diag.diagnostics)


def _unique(binding: str, state: _State) -> str:
    """`binding`, or `binding#i` with the next free i (a per-name counter: linear time)."""
    if binding not in state.nodes:
        return binding
    i = state.suffixes.get(binding, 2)
    while f"{binding}#{i}" in state.nodes:
        i += 1
    state.suffixes[binding] = i + 1
    return f"{binding}#{i}"


# ---- layers: blocks of ops used like an op ----------------------------------------

def _collect_layers(body: tuple, state: _State) -> dict[str, ast.LayerDef]:
    """The model's `layer` definitions by name (names must not shadow ops)."""
    layers: dict[str, ast.LayerDef] = {}
    for stmt in body:
        if not isinstance(stmt, ast.LayerDef):
            continue
        if stmt.name in OPS or stmt.name in layers or stmt.name in state.params:
            state.errors.add(fail(stmt.name_span, f"'{stmt.name}' is already defined",
                                  "a layer needs a name of its own (not an op or param)"))
        else:
            layers[stmt.name] = stmt
    return layers


def _call_layer(call: ast.Call, scope: _Scope, state: _State) -> Tensor:
    """Expand a layer: its body runs with only its arguments (and `tokens`) in scope, so
    names inside it never clash with the caller's; its last binding is the result."""
    layer = state.layers[call.func]
    if call.func in state.calling:
        raise fail(call.span, f"layer '{call.func}' calls itself", "layers cannot recurse")
    tensors, numbers = _layer_args(call, layer, scope, state)
    saved = (state.tensors, state.locals, state.poisoned, len(state.errors.diagnostics))
    state.tensors = {"tokens": saved[0]["tokens"], **tensors}
    state.locals, state.poisoned = numbers, set()
    state.calling.append(call.func)
    state.call_spans.append(call.span)
    try:
        last = _run_block(layer.body, scope.child(prefix=f"{scope.prefix}{call.func}."), state)
    finally:
        state.tensors, state.locals, state.poisoned = saved[:3]
        state.calling.pop()
        state.call_spans.pop()
    if len(state.errors.diagnostics) > saved[3]:
        raise _Poisoned(call.func)  # the body's own errors say what went wrong
    if last is None:
        raise fail(layer.name_span, f"layer '{layer.name}' binds no op")
    return last


def _layer_args(call: ast.Call, layer: ast.LayerDef, scope: _Scope, state: _State):
    """Match a call's arguments to the layer's parameters: tensors and numbers apart."""
    given: dict[str, ast.Expr] = {}
    for i, arg in enumerate(call.args):
        name = arg.name if isinstance(arg, ast.KwArg) else (
            layer.params[i] if i < len(layer.params) else None)
        if isinstance(arg, ast.DimsArg) or name not in layer.params or name in given:
            raise fail(arg.span, f"layer '{layer.name}' takes ({', '.join(layer.params)})")
        given[name] = arg.value
    missing = [p for p in layer.params if p not in given]
    if missing:
        raise fail(call.span, f"layer '{layer.name}' is missing its argument '{missing[0]}'")
    tensors, numbers = {}, {}
    for name, value in given.items():
        if _is_tensor(value, state):
            tensors[name] = _tensor(value, f"{layer.name}.{name}", scope, state)
        else:
            numbers[name] = _number(value, state)
    return tensors, numbers


# ---- numbers and shapes ----------------------------------------------------------

def _number(node: ast.Expr, state: _State) -> sympy.Expr:
    return to_sympy(node, lambda n: _lookup(n, state), lambda e: _at_defaults(e, state))


def _lookup(name: ast.Name, state: _State) -> sympy.Expr:
    if name.id in state.locals:
        return state.locals[name.id]
    if name.id in state.params:
        return state.params[name.id].expr
    if name.id in BUILTINS:
        return sym(name.id)
    if name.id in state.tensors:
        raise fail(name.span, f"'{name.id}' is a tensor, not a number")
    if name.id in DTYPES:
        raise fail(name.span, f"'{name.id}' is a dtype", "dtypes go in `weights=`, `kv=`, `act=`")
    raise fail(name.span, f"unknown name '{name.id}'",
               did_you_mean(name.id, list(state.params) + list(state.tensors) + list(BUILTINS)))


def _at_defaults(expr: sympy.Expr, state: _State) -> sympy.Expr:
    return expr.xreplace(state.defaults)


def _dimension(node: ast.Expr, state: _State) -> sympy.Expr:
    """A width: must be a positive whole number at the param defaults, free of B, N, T."""
    return _positive_int(node, state, "dimension")


def _positive_int(node: ast.Expr, state: _State, what: str) -> sympy.Expr:
    expr = _number(node, state)
    value = _at_defaults(expr, state)
    if value.free_symbols:
        raise fail(node.span, f"a {what} cannot depend on B, N or T")
    if not value > 0:
        raise fail(node.span, f"{what} must be positive, got {value}")
    if not value.is_integer:
        raise fail(node.span, f"{what} must be a whole number, got {float(value):g}")
    if value > _MAX_DIM:
        raise fail(node.span, f"absurdly large {what} ({float(value):.3g})")
    _require(state, "positive", expr, what, node.span)
    _require(state, "whole", expr, what, node.span)
    _require(state, "le", expr, f"{what} <= 2^53", node.span, sympy.Integer(_MAX_DIM))
    return expr


def _equal(a: sympy.Expr, b: sympy.Expr, state: _State) -> bool:
    return bool(sympy.Eq(_at_defaults(a, state), _at_defaults(b, state)))


def _shape_error(call, binding, tensors, mm: ShapeMismatch, state) -> SpecError:
    got = tensors[mm.index]
    have = _at_defaults(got.width, state)
    want = _at_defaults(mm.expected, state)
    producer = got.producer or "the input"
    where = state.nodes[got.producer].span if got.producer else None
    at = f" (defined at {where})" if where else ""
    return fail(call.span, f"shape mismatch between '{producer}' and '{binding}': "
                f"'{producer}'{at} produces width {have}, but {call.func}() input "
                f"{mm.index + 1} needs {want} ({mm.expected})", mm.what)
