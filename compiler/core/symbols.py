"""One canonical sympy Symbol per name, so every stage builds the same expressions.

B (batch), N (cached context tokens), T (new tokens per sequence) and the parallel
degrees tp, ep, pp, dp are positive integers; model params and hardware quantities are
positive reals.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from infest.compiler.core.keys import BUILTINS, PARALLEL

PARALLEL_DOC = {
    "tp": "tensor-parallel GPUs (heads, columns, rows, vocab split)",
    "ep": "expert-parallel GPUs (routed experts spread)",
    "pp": "pipeline stages (layers split in order)",
    "dp": "data-parallel replicas (each serves B / dp sequences)",
}
# The conventional model params (the names import-hf writes), in words; a spec's own
# params are named by their words.
PARAM_DOC = {
    "trained_context": "trained context, tokens", "hidden": "hidden size",
    "layers": "layers", "dense_layers": "dense (non-MoE) layers", "heads": "attention heads",
    "kv_heads": "KV heads", "head_dim": "head dimension", "ffn": "MLP width",
    "vocab": "vocabulary size", "experts": "routed experts per MoE layer",
    "top_k": "experts per token", "expert_ffn": "expert MLP width",
    "shared_ffn": "shared expert MLP width", "window": "sliding window, tokens",
    "q_lora_rank": "query low-rank size", "kv_lora_rank": "KV latent size",
    "rope_dim": "rope dimension per head", "nope_dim": "non-rope dimension per head",
    "v_dim": "value dimension per head",
}
BUILTIN_DOC = {
    "B": "sequences in the batch",
    "N": "context: tokens already in each sequence's KV cache",
    "T": "new tokens per sequence in this step (decode: 1)",
}


@lru_cache(maxsize=None)
def sym(name: str) -> sympy.Symbol:
    """The Symbol for `name` (B, N, T are positive integers; compute peaks flops_* are
    nonnegative, 0 where the GPU has no such math, and so is the clock, 0 where not
    given, so the forms can test them; the rest positive)."""
    if name in BUILTINS or name in PARALLEL:
        return sympy.Symbol(name, positive=True, integer=True)
    if name.startswith("flops_") or name == "clock":
        return sympy.Symbol(name, nonnegative=True)
    return sympy.Symbol(name, positive=True)


B, N, T = sym("B"), sym("N"), sym("T")
