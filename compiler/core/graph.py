"""The op graph's records: one OpNode per op, and the CompiledModel that holds them.

Built by compiler/core/elaborate.py; read by the passes, the closed forms and diagnosis.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import sympy

from infest.compiler.core.constraints import Constraint
from infest.compiler.core.cost import Cost
from infest.compiler.core.keys import TRAINED_CONTEXT
from infest.compiler.core.ops import DTypes
from infest.compiler.core.params import Param, defaults_of
from infest.dsl import ast
from infest.dsl.errors import Span

if TYPE_CHECKING:
    import networkx as nx

    from infest.compiler.passes.collectives import Collective
    from infest.compiler.passes.engine import Fusion


@dataclass(frozen=True)
class OpNode:
    """One op of the graph, costed for one instance; `count` instances run per step."""

    name: str
    kind: str
    group: str
    count: sympy.Expr
    cost: Cost
    params: sympy.Expr          # stored params of one instance (all experts)
    params_active: sympy.Expr   # params one token uses (top-k experts)
    kv_cache: sympy.Expr        # KV bytes held per sequence of L_ctx tokens
    kv_per_token: sympy.Expr
    peak: str                   # hardware flops_<peak> its math runs at
    width: sympy.Expr
    dtypes: DTypes
    inputs: tuple[str, ...]
    span: Span
    args: dict[str, sympy.Expr] = field(default_factory=dict)  # numeric args, d_in, d_out
    experts: tuple[sympy.Expr, sympy.Expr] | None = None  # (E, top_k) inside a moe body
    weight_share: sympy.Expr = sympy.Integer(1)  # of its weights one GPU holds (sharded)
    cols_share: sympy.Expr = sympy.Integer(1)    # of its output columns one GPU computes
    kv_share: sympy.Expr = sympy.Integer(1)      # of its KV cache one GPU holds
    comm: "Collective | None" = None             # set on collective ops
    blocks: sympy.Expr | None = None             # thread blocks per launch, if stated
    last_token: bool = False                     # runs on B rows (each sequence's last)
    param_bytes: sympy.Expr | None = None        # stored bytes of `params` when some tensor
                                                 # has its own dtype; None: all at weights
    held: str = ""                               # a `held` block's group: weights stored,
                                                 # not run in a step; "": runs


@dataclass
class CompiledModel:
    """A checked model: params, ops in a deterministic topological order, the op graph.

    Ops are kept in the order they were elaborated: an op can only consume tensors bound
    before it, so that order is topological, and it equals networkx's lexicographical
    topological sort keyed by position. The networkx graph itself is built on first use,
    which keeps networkx's import off the `infest eval` path.
    """

    name: str
    title: str
    file: str
    params: dict[str, Param]
    ops: list[OpNode]
    default_dtypes: DTypes
    policies: dict[str, ast.PolicyDef] = field(default_factory=dict)
    layers: sympy.Expr = sympy.Integer(1)        # layers a pipeline can split (top-level repeats)
    stage_width: sympy.Expr | None = None        # width of the residual entering the layers
    # Conditions on inputs checked at every evaluated point (see compiler/core/constraints.py).
    constraints: list[Constraint] = field(default_factory=list)
    fusions: tuple[Fusion, ...] = ()             # `fuse` groups, applied by a fusing engine

    @cached_property
    def graph(self) -> "nx.DiGraph":
        """The op graph: a node per op (attribute `op`), an edge per tensor consumed."""
        import networkx as nx
        graph = nx.DiGraph()
        for op in self.ops:
            graph.add_node(op.name, op=op)
            graph.add_edges_from((producer, op.name) for producer in op.inputs)
        return graph

    @property
    def trained_context(self) -> sympy.Expr | None:
        """The context the model was trained for (its `trained_context` param, an input
        symbol with a default), or None when the spec does not state it."""
        param = self.params.get(TRAINED_CONTEXT)
        return param.expr if param is not None else None

    @property
    def inputs(self) -> dict[sympy.Symbol, sympy.Expr]:
        """Input params -> default values."""
        return defaults_of(self.params)
