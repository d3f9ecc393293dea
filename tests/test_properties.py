"""Hypothesis properties over randomly sized models:
- every closed form equals a numeric walk over the op graph (count x per-op cost);
- step bytes and step time never fall as B or N grows."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy
from hypothesis import HealthCheck, given, settings, strategies as st

from infest.compiler.api import analyze
from infest.compiler.core.ops import L
from infest.compiler.core.symbols import sym

HW = Path(__file__).parents[1] / "specs" / "hardware" / "h100_sxm.arch"

TEMPLATE = """
model rnd {{
  hidden = {hidden}; layers = {layers}; heads = {heads}; kv_heads = {kv_heads}
  head_dim = hidden / heads; ffn = {ffn}; vocab = {vocab}
  weights: {wdtype}; kv: {kvdtype}
  x = embed(tokens, vocab -> hidden) group embedding
  repeat layers {{
    h = rmsnorm(x) group norm
    q = linear(h, hidden -> heads * head_dim) group attention
    k = linear(h, hidden -> kv_heads * head_dim)
    v = linear(h, hidden -> kv_heads * head_dim)
    a = attention(q, k, v, heads, kv_heads, head_dim{window})
    o = linear(a, heads * head_dim -> hidden)
    x = add(x, o)
    h = rmsnorm(x) group norm
    {mlp}
    x = add(x, d)
  }}
  logits = linear(rmsnorm(x), hidden -> vocab) group lm_head
}}
"""
DENSE = """g = linear(h, hidden -> ffn) group mlp
    u = linear(h, hidden -> ffn)
    d = linear(silu_mul(g, u), ffn -> hidden)"""
MOE = """r = router(h, hidden -> {experts}) group router
    d = moe(h, experts = {experts}, top_k = {top_k}) group experts {{
      g = linear(h, hidden -> ffn)
      u = linear(h, hidden -> ffn)
      e = linear(silu_mul(g, u), ffn -> hidden)
    }}"""


@st.composite
def specs(draw: st.DrawFn) -> str:
    heads = draw(st.sampled_from([1, 2, 4, 8, 16]))
    kv_heads = draw(st.sampled_from([h for h in (1, 2, 4, 8, 16) if heads % h == 0]))
    experts = draw(st.integers(2, 64))
    mlp = draw(st.sampled_from([DENSE, MOE.format(experts=experts,
                                                  top_k=draw(st.integers(1, experts)))]))
    window = draw(st.sampled_from(["", ", window = 64", ", window = 4096"]))
    return TEMPLATE.format(hidden=heads * draw(st.sampled_from([16, 64, 128])),
                           layers=draw(st.integers(1, 64)), heads=heads, kv_heads=kv_heads,
                           ffn=draw(st.integers(1, 20000)), vocab=draw(st.integers(2, 200000)),
                           wdtype=draw(st.sampled_from(["bf16", "fp8", "mxfp4", "bits = 3"])),
                           kvdtype=draw(st.sampled_from(["bf16", "fp8"])), window=window, mlp=mlp)


def _analysis(tmp_path: Path, text: str, phase: str = "decode"):
    path = tmp_path / "rnd.arch"
    path.write_text(text)
    return analyze(path, hw=HW, phase=phase)


def _walk(analysis, point: dict[str, float]) -> dict[str, float]:
    """Sum count x cost over the graph's nodes, each evaluated on its own."""
    values = {sym(k): sympy.Float(v, 30) for k, v in point.items()}
    totals = {"flops": 0.0, "bytes": 0.0, "kernels": 0.0, "kv_held": 0.0}
    for name in analysis.model.graph.nodes:
        op = analysis.model.graph.nodes[name]["op"]
        n = float(op.count.xreplace(values))
        totals["flops"] += n * float(op.cost.flops.xreplace(values))
        totals["bytes"] += n * float(op.cost.bytes.xreplace(values))
        totals["kernels"] += n * float(op.cost.kernels.xreplace(values))
        held = op.kv_cache.xreplace({L: sym("N") + sym("T")}).xreplace(values)
        totals["kv_held"] += n * float(held) * point["B"]
    return totals


points = st.fixed_dictionaries({"B": st.integers(1, 4096), "N": st.integers(1, 300000),
                                "T": st.integers(1, 64)})


@settings(max_examples=25, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=specs(), point=points)
def test_closed_form_equals_graph_walk(tmp_path: Path, text: str, point: dict) -> None:
    analysis = _analysis(tmp_path, text)
    result = analysis.evaluate(point)
    walk = _walk(analysis, {**point, **{i.name: float(i.value) for i in analysis.inputs(point)
                                       if i.name not in point}})
    assert result["step"]["flops"] == pytest.approx(walk["flops"], rel=1e-9)
    assert result["step"]["bytes"] == pytest.approx(walk["bytes"], rel=1e-9)
    assert result["step"]["kernels"] == pytest.approx(walk["kernels"], rel=1e-9)
    assert result["memory"]["kv_bytes"] == pytest.approx(walk["kv_held"], rel=1e-9)


def _grid(analysis, key: str, Bs: np.ndarray, Ns: np.ndarray) -> np.ndarray:
    inputs = analysis.inputs()
    fn = analysis.compiled([i.name for i in inputs])
    values = {i.name: float(i.value) for i in inputs}
    values.update(B=Bs[:, None], N=Ns[None, :])
    return np.broadcast_to(fn(values)[key], (len(Bs), len(Ns)))


@settings(max_examples=15, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=specs(), phase=st.sampled_from(["decode", "prefill"]))
def test_bytes_and_time_never_fall_as_B_or_N_grow(tmp_path: Path, text: str, phase: str) -> None:
    analysis = _analysis(tmp_path, text, phase)
    Bs = np.unique(np.geomspace(1, 4096, 14).round())
    Ns = np.unique(np.geomspace(1, 262144, 14).round())
    for key in ("step.bytes", "step.time_s", "step.flops", "memory.total_bytes"):
        grid = _grid(analysis, key, Bs, Ns)
        assert np.all(np.diff(grid, axis=0) >= -1e-9 * np.abs(grid[1:])), key
        assert np.all(np.diff(grid, axis=1) >= -1e-9 * np.abs(grid[:, 1:])), key
