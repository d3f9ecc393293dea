"""The draft model of a spec's multi-token-prediction (MTP) layers (`serve --draft mtp`).

import-hf writes a checkpoint's MTP layers after the logits as a held block,
`draft = held(x) group mtp { repeat mtp_layers { x = mtp(x) } }`: in memory, run by no
plain step. The draft model is the same spec read another way (`mtp_model`, applied to
the AST before elaboration): the statements before the first top-level `repeat` (the
embedding of the token just drafted), ONE pass of the MTP block's body (its top-level
`repeat` run once: a draft step runs one module), then the statements after the last
top-level `repeat` (the shared final norm and LM head, on the MTP output); the main
model's layers are held (weights stored, nothing run, no KV cache), so every group a
policy names still exists and the draft's weights are exactly the target's. Serving with
it: compiler/analyses/mtp.py.
"""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from infest.compiler.core.exprs import contains_op_call
from infest.dsl import ast
from infest.dsl.errors import fail

DRAFT_MTP = "mtp"     # the --draft value, and the group of the held block it runs
HELD_TARGET = "target_layers"  # the draft's binding (and group) of the held main layers


def mtp_model(model: ast.Model) -> ast.Model:
    """The draft model of a spec with MTP layers (module doc); an error naming what is
    missing when it has none."""
    block = mtp_block(model)
    body = list(model.body)
    first, last = _layer_span(model)
    between = body[first:last + 1]
    main = tuple(s for s in between if _is_op(s))
    held = ast.Assign(HELD_TARGET, block.value, HELD_TARGET, main, block.span, block.target_span)
    # Ops of the MTP block that name no group stay in group mtp, as they were held.
    run = [ast.GroupStmt(DRAFT_MTP, block.span)] + [_once(s) for s in block.body or ()]
    after = [s for s in body[last + 1:] if s is not block]
    new = body[:first] + [s for s in between if not _is_op(s)] + run + after + [held]
    return replace(model, body=tuple(new))


def _layer_span(model: ast.Model) -> tuple[int, int]:
    """Indices of the first and last top-level `repeat`: the main model's layers."""
    loops = [i for i, s in enumerate(model.body) if isinstance(s, ast.Repeat)]
    if not loops:
        raise fail(model.name_span, f"--draft mtp: model '{model.name}' has no top-level "
                   "`repeat` of layers", "the draft runs the statements before the layers, "
                   "the MTP block, then those after them")
    return loops[0], loops[-1]


def mtp_block(model: ast.Model) -> ast.Assign:
    """The model's held MTP block, `NAME = held(x) group mtp { ... }`, or a clear error."""
    for stmt in model.body:
        if (isinstance(stmt, ast.Assign) and stmt.group == DRAFT_MTP and stmt.body
                and isinstance(stmt.value, ast.Call) and stmt.value.func == "held"):
            return stmt
    raise fail(model.name_span, f"--draft mtp: model '{model.name}' has no multi-token-"
               "prediction layers (no `held(x) group mtp { ... }` block)",
               "import-hf writes one for checkpoints with num_nextn_predict_layers or "
               "num_mtp_modules; else pass a draft model's spec: --draft SPEC")


def _is_op(stmt: ast.Stmt) -> bool:
    """A statement that binds ops or repeats them (not a param, layer, policy, dtype or group)."""
    return isinstance(stmt, ast.Repeat) or (isinstance(stmt, ast.Assign) and (
        stmt.body is not None or contains_op_call(stmt.value)))


def _once(stmt: ast.Stmt) -> ast.Stmt:
    """A top-level `repeat` of the MTP block run once: a draft step runs one module."""
    if not isinstance(stmt, ast.Repeat):
        return stmt
    return replace(stmt, count=ast.Num(Fraction(1), None, "1", stmt.count.span))
