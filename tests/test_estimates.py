"""The estimate's per-kind terms, engine profiles and the joint calibration, by hand."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import sympy

from infest.compiler.analyses import calibrate as cal
from infest.compiler.analyses import fit as jf
from infest.compiler.analyses.serve import Request, Serving, serve
from infest.compiler.api import analyze
from infest.compiler.core.graph import OpNode
from infest.compiler.forms.estimate import busiest_rank, collective, tile_padding
from infest.compiler.load.engine_profiles import load_profiles, read_profile
from infest.compiler.passes.collectives import Collective, Links, call_time
from infest.compiler.core.symbols import sym
from infest.dsl.errors import Span, SpecError

ROOT = Path(__file__).parents[1]
LLAMA8 = ROOT / "specs" / "models" / "llama3_1_8b.arch"


def _num(expr: sympy.Expr, **values: float) -> float:
    return float(expr.subs({sym(k): v for k, v in values.items()}))


def test_gemm_rows_pad_to_whole_tiles() -> None:
    # 100 rows in tiles of 64: ceil(100/64) = 2 tiles = 128 rows, 128/100 = 1.28.
    assert _num(tile_padding(sym("M")), M=100, gemm_tile_m=64) == pytest.approx(1.28)
    # decode at batch 8: one tile of 64 rows for 8 of them, 8x the FLOPs of the math.
    assert _num(tile_padding(sym("M")), M=8, gemm_tile_m=64) == pytest.approx(8.0)
    assert _num(tile_padding(sym("M")), M=128, gemm_tile_m=64) == pytest.approx(1.0)


def test_busiest_expert_rank_by_hand() -> None:
    # 1024 tokens x top-8 over ep = 8 ranks: mean 1024 per rank;
    # busiest ~ 1 + sqrt(2 ln 8 / 1024) = 1 + sqrt(4.1589 / 1024) = 1.06373 of the mean.
    f = busiest_rank(sym("n"), 8)
    assert _num(f, n=1024, ep=8, moe_skew=1) == pytest.approx(1.063729, rel=1e-5)
    assert _num(f, n=1024, ep=8, moe_skew=0) == 1.0          # perfectly balanced
    assert _num(f, n=1024, ep=1, moe_skew=1) == 1.0          # one rank holds every expert
    # one token: mean 8/8 = 1 copy per rank, busiest 1 + sqrt(2 ln 8) = 3.0393
    assert _num(f, n=1, ep=8, moe_skew=1) == pytest.approx(1 + math.sqrt(2 * math.log(8)))
    assert _num(f, n=1e-3, ep=8, moe_skew=1) == 8.0          # capped: one rank takes all


def _collective_node(kind: str, gpus: int, copies: int = 1) -> OpNode:
    node = OpNode.__new__(OpNode)
    object.__setattr__(node, "kind", kind)
    object.__setattr__(node, "comm", Collective(kind, sympy.Integer(gpus), sympy.Integer(copies)))
    return node


def test_ring_all_reduce_at_8_gpus_by_hand() -> None:
    node = _collective_node("all_reduce", 8)
    links = Links(net=False)
    payload = 1 << 20
    op = {"t_comm_s": call_time(node.comm, sympy.Integer(payload), links)}
    values = dict(link_latency=5e-6, link_bw=450e9, coll_step_latency=0.86e-6, eff_link=0.8)
    # 5 us + 2(8-1) = 14 ring steps x 0.86 us + 2 x 7/8 x 1 MiB / (0.8 x 450 GB/s)
    # = 5 + 12.04 + 5.0972 us.
    want = 5e-6 + 14 * 0.86e-6 + 1.75 * payload / (0.8 * 450e9)
    assert _num(collective(node, op, links), **values) == pytest.approx(want, rel=1e-12)


def test_dispatch_across_nodes_sends_a_token_once_per_node() -> None:
    # 16 GPUs, 8 per node: M = 2 nodes; 8 copies reach the other node with probability
    # 1 - (1/2)^8 = 255/256, so the network carries 255/256 token copies of the 8 in
    # the payload: 255/2048 of it (not 15/16, a copy per remote GPU).
    c = Collective("all_to_all", sympy.Integer(16), sympy.Integer(8))
    t = call_time(c, sympy.Integer(2048), Links())
    values = dict(link_latency=0, net_latency=0, link_bw=1e30, net_bw=1.0, gpus_per_node=8)
    assert _num(t, **values) == pytest.approx(255.0)


def test_step_overhead_is_a_term_of_the_estimate_only() -> None:
    a = analyze(LLAMA8, hw="h100_sxm")
    off, on = a.evaluate({"B": 4}), a.evaluate({"B": 4, "step_overhead": 0.001})
    assert off["step"]["t_overhead_s"] == 0 and on["step"]["t_overhead_s"] == 0.001
    assert on["step"]["estimate_s"] - off["step"]["estimate_s"] == pytest.approx(0.001, rel=1e-9)
    assert on["step"]["roofline_s"] == off["step"]["roofline_s"]


def test_ttft_adds_the_request_overhead_under_the_estimate_only() -> None:
    engine = Serving(analyze(LLAMA8, hw="h200_sxm"), analyze(LLAMA8, hw="h200_sxm", phase="prefill"))
    base = serve(engine, Request(1000, 50, 4, "static"), {})
    more = serve(engine, Request(1000, 50, 4, "static"), {"request_overhead": 0.02})
    assert more["ttft_s"] - base["ttft_s"] == pytest.approx(0.02, rel=1e-9)
    assert more["bound"]["ttft_s"] == base["bound"]["ttft_s"]


def test_shipped_profiles_give_every_number_a_source() -> None:
    profiles = load_profiles()
    assert {"vllm", "sglang", "trtllm"} <= set(profiles)
    for p in profiles.values():
        assert set(p.sources) >= set(p.fields)
        assert all(p.sources.values())


def test_a_profile_without_a_source_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"name": "x", "fields": {"step_overhead": {"value": 1e-4}}}))
    with pytest.raises(SpecError, match="needs"):
        read_profile(bad)
    bad.write_text(json.dumps({"name": "x", "fields": {"eff_mem": {"value": 2, "source": "s"}}}))
    with pytest.raises(SpecError, match=r"in \(0, 1\]"):
        read_profile(bad)


def test_calibration_recombines_the_compiled_estimate(tmp_path: Path) -> None:
    # Mixtral on 2 GPUs (GEMMs, experts, collectives): the calibration's numpy
    # recombination equals the forms' estimate_s at the same inputs.
    csv = tmp_path / "m.csv"
    csv.write_text("spec,hardware,tp,ep,engine,phase,B,N,step_s\n"
                   "mixtral_8x7b,h200_sxm,2,2,vllm,decode,8,96,0.015\n"
                   "mixtral_8x7b,h200_sxm,2,2,vllm,prefill,2,512,0.05\n")
    rows = cal.prepare(cal.read_measurements(csv), "h200_sxm", tmp_path)
    for p in rows:
        a = analyze("mixtral_8x7b", hw="h200_sxm", phase=p.row.phase, engine="vllm")
        want = a.evaluate(p.row.point)["step"]["estimate_s"]
        assert float(p.estimate({})) == pytest.approx(want, rel=1e-12)


def _synthetic(n: int, truth: dict[str, float]) -> list[cal.Prepared]:
    """Rows of made-up terms whose measurement is the estimate at `truth`."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(n):
        gpu, engine = ("g1", "g2")[i % 2], ("e1", "e2")[(i // 2) % 2]
        ops = 5
        terms = {k: np.zeros(ops) for k in ("t_compute_s", "t_memory_s", "t_launch_s", "t_comm_s",
                                             "t_host_s", "time_s", "kernels")}
        terms["t_compute_s"] = rng.uniform(0, 2e-3, ops)
        terms["t_memory_s"] = rng.uniform(0, 2e-3, ops)
        terms["kernels"] = rng.integers(1, 400, ops).astype(float)
        parts = {"scale": np.ones(ops), "attn": (np.arange(ops) == 0).astype(float),
                 "comm_fixed": np.zeros(ops), "comm_steps": np.zeros(ops)}
        inputs = {k: float(v) for k, v in cal.ESTIMATE_DEFAULTS.items()}
        inputs.update(eff_mem=0.8, eff_flops=0.7, eff_link=0.8)
        row = cal.Row(Span("synthetic", i + 1, 1, i + 1, 2), "s", gpu, "decode", None, engine,
                      {"B": 1, "N": 1, "T": 1, "tp": 1, "ep": 1, "pp": 1, "dp": 1}, 1.0)
        p = cal.Prepared(row, np.ones(ops), terms, parts, 0.0, 0.0, inputs)
        row_truth = dict(truth)
        p.row = cal.Row(row.span, "s", gpu, "decode", None, engine, row.point,
                        float(p.estimate(row_truth)))
        rows.append(p)
    return rows


def test_the_regularised_fit_recovers_known_parameters() -> None:
    truth = {"eff_mem": 0.75, "eff_flops": 0.6, "eff_attn": 0.45, "eff_link": 0.8,
             "kernel_latency": 5e-6, "step_overhead": 2e-4, "request_overhead": 0.0}
    rows = _synthetic(60, truth)
    f = jf.fit_all(rows)
    got = f.values("g1", "e1")
    for name in ("eff_mem", "eff_flops", "eff_attn", "kernel_latency"):
        assert got[name] == pytest.approx(truth[name], rel=0.05), name
    assert max(abs(e) for e in jf.row_errors(rows, f)) < 0.02
    assert jf.violations(f, jf.pairs_of(rows)) == []
    # A GPU held out gets the shared values: its offset is 0.
    assert f.values("unseen", "e1")["eff_mem"] == pytest.approx(
        math.exp(math.log(f.shared["eff_mem"]) + f.engine["e1"]["eff_mem"]))


def test_every_admitted_measurement_is_at_or_above_its_overlap_floor() -> None:
    # bench/measurements.csv: no engine beats max(FLOPs / peak, bytes / bw, collectives).
    path = ROOT / "bench" / "measurements.csv"
    rows = cal.read_measurements(path)
    assert len(rows) >= 60 and len({r.hardware for r in rows}) >= 6
    for hw in sorted({r.hardware for r in rows}):
        for p in cal.prepare([r for r in rows if r.hardware == hw], hw, path.parent):
            assert p.floor_s <= p.row.step_s, p.row.span
