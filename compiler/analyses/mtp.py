"""`serve --draft mtp`: a spec's own multi-token-prediction (MTP) layers as the draft.

import-hf writes a checkpoint's MTP layers after the logits as a held block,
`draft = held(x) group mtp { repeat mtp_layers { x = mtp(x) } }`: in memory, run by no
plain step. The draft model is the same spec read another way (`mtp_model`, applied to
the AST before elaboration): the statements before the first top-level `repeat` (the
embedding of the token just drafted), ONE pass of the MTP block's body (its top-level
`repeat` run once), then the statements after the last top-level `repeat` (the shared
final norm and LM head, on the MTP output); the main model's layers are held (weights
stored, nothing run, no KV cache), so every group a policy names still exists and the
draft's weights are exactly the target's.

A draft step runs one module: draft token k uses module k mod D (D = the modules the
spec holds), as vLLM does (vllm/model_executor/models/deepseek_mtp.py, `spec_step_idx %
num_mtp_layers`); SGLang drafts several steps with DeepSeek-V3's single NextN module
(`--speculative-num-steps`). So K may exceed D; a round costs K draft steps.

Memory: the MTP weights are already in the target's memory (held), so `fits` adds only
the draft's KV cache, one module's cache per sequence times D (each module caches its own
keys and values). The draft's prefill (its forward over prompt tokens, which fills that
cache) runs one module as well: for D > 1 it is one module's share (an estimate, low).
"""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping

from infest.dsl import ast
from infest.dsl.errors import fail

DRAFT_MTP = "mtp"     # the --draft value, and the group of the held block it runs
HELD_TARGET = "target_layers"  # the draft's binding (and group) of the held main layers


def mtp_model(model: ast.Model) -> ast.Model:
    """The draft model of a spec with MTP layers (module doc); an error naming what is
    missing when it has none."""
    block = mtp_block(model)
    body = list(model.body)
    loops = [i for i, s in enumerate(body) if isinstance(s, ast.Repeat)]
    if not loops:
        raise fail(model.name_span, f"model '{model.name}' has no top-level `repeat` of "
                   "layers for its MTP draft to stand beside",
                   "the draft runs the statements before the layers, the MTP block, then "
                   "those after them")
    first, last = loops[0], loops[-1]
    main = [s for s in body[first:last + 1] if _is_op(s)]
    kept = [s for s in body[first:last + 1] if not _is_op(s)]
    after = [s for s in body[last + 1:] if s is not block]
    held = ast.Assign(HELD_TARGET, block.value, HELD_TARGET, tuple(main), block.span,
                      block.target_span)
    run = [ast.GroupStmt(DRAFT_MTP, block.span)] + [_once(s) for s in block.body or ()]
    new = body[:first] + kept + run + after + [held]
    return replace(model, body=tuple(new))


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
        stmt.body is not None or isinstance(stmt.value, ast.Call)))


def _once(stmt: ast.Stmt) -> ast.Stmt:
    """A top-level `repeat` of the MTP block run once: a draft step runs one module."""
    if not isinstance(stmt, ast.Repeat):
        return stmt
    return replace(stmt, count=ast.Num(Fraction(1), None, "1", stmt.count.span))


def module_count(spec: str | Path, model: str | None, defaults: Mapping[str, Any],
                 overrides: Mapping[str, Any]) -> int:
    """D, the MTP modules the spec holds: the count of its MTP block's top-level `repeat`
    (1 without one), a number or an input param (its value from `--set`, else
    `defaults`, a draft runner's)."""
    from infest.compiler.load.loader import load_program, pick_model
    node, _ = pick_model(load_program(Path(spec)), model, Path(spec))
    loops = [s for s in mtp_block(node).body or () if isinstance(s, ast.Repeat)]
    if not loops:
        return 1
    if len(loops) > 1:
        raise fail(loops[1].span, "--draft mtp: the MTP block repeats one module",
                   "write its modules as one `repeat N { x = mtp(x) }`")
    count = loops[0].count
    value = count.value if isinstance(count, ast.Num) else (
        overrides.get(count.id, defaults.get(count.id)) if isinstance(count, ast.Name) else None)
    if value is None or Fraction(value) != int(value) or int(value) < 1:
        raise fail(count.span, "--draft mtp: the MTP block's repeat count must be a whole "
                   "number or an input param", "e.g. `mtp_layers = 1` and `repeat mtp_layers`")
    return int(value)


def mtp_draft(spec: str, hw: str, length: int, acceptance: float, overrides: Mapping[str, Any],
              **options: Any) -> Any:
    """The Draft of `serve --draft mtp`: the spec's MTP draft runners (decode and prefill,
    under the target's model, policy, engine and use in `options`) and D."""
    from infest.compiler.analyses.serve import Serving
    from infest.compiler.analyses.speculative import Draft
    from infest.compiler.backend.cache import cached_runner
    use = options.pop("use")
    engine = Serving(*(cached_runner(spec, hw, phase=phase, draft=DRAFT_MTP, **options)
                       for phase in ("decode", "prefill")), use=use)
    if float(overrides.get("pp", engine.decode.defaults.get("pp", 1))) != 1:
        raise fail(None, "--draft mtp with pp > 1: engines run the MTP layers on the last "
                   "pipeline stage, which this draft model does not cost",
                   "serve MTP drafts with tp, ep and dp (pp = 1)")
    modules = module_count(spec, options.get("model"), engine.decode.defaults, overrides)
    return Draft(engine, length, acceptance, modules)
