"""`serve --draft mtp`: a spec's own multi-token-prediction (MTP) layers as the draft.

The draft's step forms come from the same spec read as a draft model
(compiler/core/mtp.py: the embedding, one MTP module, the shared final norm and LM head;
the main layers held). A draft step runs one module: draft token k uses module k mod D
(D = the modules the spec holds), as vLLM does (vllm/model_executor/models/deepseek_mtp.py,
`spec_step_idx % num_mtp_layers`); SGLang drafts several steps with DeepSeek-V3's single
NextN module (`--speculative-num-steps`). So K may exceed D; a round costs K draft steps.

Memory: the MTP weights are already in the target's memory (held), so `fits` adds only
the draft's KV cache, one module's cache per sequence times D (each module caches its own
keys and values). The draft's prefill (its forward over prompt tokens, which fills that
cache) runs one module as well: for D > 1 it is one module's share (an estimate, low).
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping

from infest.compiler.analyses.serve import Serving
from infest.compiler.analyses.speculative import Draft
from infest.compiler.backend.cache import cached_runner
from infest.compiler.core.mtp import DRAFT_MTP, mtp_block
from infest.compiler.load.loader import load_program, pick_model
from infest.dsl import ast
from infest.dsl.errors import fail


def module_count(spec: str | Path, model: str | None, defaults: Mapping[str, Any],
                 overrides: Mapping[str, Any]) -> int:
    """D, the MTP modules the spec holds: the count of its MTP block's `repeat` (1 without
    one), a number or an input param (its value from `--set`, else `defaults`, a draft
    runner's)."""
    node, _ = pick_model(load_program(Path(spec)), model, Path(spec))
    count = _repeat_count(mtp_block(node))
    if count is None:
        return 1
    value = count.value if isinstance(count, ast.Num) else (
        overrides.get(count.id, defaults.get(count.id)) if isinstance(count, ast.Name) else None)
    if value is None or Fraction(value) != int(value) or int(value) < 1:
        raise fail(count.span, "--draft mtp: the MTP block's repeat count must be a whole "
                   "number or an input param", "e.g. `mtp_layers = 1` and `repeat mtp_layers`")
    return int(value)


def _repeat_count(block: ast.Assign) -> ast.Expr | None:
    """The count of the MTP block's one top-level `repeat`, or None without one."""
    loops = [s for s in block.body or () if isinstance(s, ast.Repeat)]
    if len(loops) > 1:
        raise fail(loops[1].span, "--draft mtp: the MTP block repeats one module",
                   "write its modules as one `repeat N { x = mtp(x) }`")
    return loops[0].count if loops else None


def mtp_draft(spec: str, hw: str, length: int, acceptance: float, overrides: Mapping[str, Any],
              **options: Any) -> Draft:
    """The Draft of `serve --draft mtp`: the spec's MTP draft runners (decode and prefill,
    under the target's model, policy, engine and use in `options`) and D."""
    use = options.pop("use")
    engine = Serving(*(cached_runner(spec, hw, phase=phase, draft=DRAFT_MTP, **options)
                       for phase in ("decode", "prefill")), use=use)
    if float(overrides.get("pp", engine.decode.defaults.get("pp", 1))) != 1:
        raise fail(None, "--draft mtp with pp > 1: engines run the MTP layers on the last "
                   "pipeline stage, which this draft model does not cost",
                   "serve MTP drafts with tp, ep and dp (pp = 1)")
    modules = module_count(spec, options.get("model"), engine.decode.defaults, overrides)
    return Draft(engine, length, acceptance, modules)
