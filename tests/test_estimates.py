"""The estimate (issues #14, #23): per-kind terms by hand, never below the bound (which is
never below the overlap floor, issue #22), engine profiles and the joint calibration."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import sympy

from infest.compiler.analyses.arrivals import QUEUE_KEYS
from infest.compiler.analyses import calibrate as cal
from infest.compiler.analyses import fit as jf
from infest.compiler.analyses.serve import Request, Serving, serve
from infest.compiler.api import analyze
from infest.compiler.core.graph import OpNode
from functools import lru_cache

from hypothesis import given, settings
from hypothesis import strategies as st

from infest.compiler.core.estimate_rule import Kind, op_estimate
from infest.compiler.core.terms import HARD_KEYS
from infest.compiler.forms.estimate import PARAMS, SYMBOLIC, busiest_rank, estimate_parts, tile_padding
from infest.compiler.load.engine_profiles import load_profiles, read_profile
from infest.compiler.passes.collectives import Collective, Links, call_time
from infest.compiler.core.symbols import sym
from infest.dsl.errors import Span, SpecError

ROOT = Path(__file__).parents[1]
LLAMA8 = ROOT / "specs" / "models" / "llama3_1_8b.arch"
MODELS = sorted((ROOT / "specs" / "models").glob("*.arch"))
HARDWARE = ("h100_sxm", "h200_sxm", "gh200")


@lru_cache(maxsize=None)
def _analysis(model: str, hw: str, phase: str):
    return analyze(ROOT / "specs" / "models" / model, hw=hw, phase=phase)


def _num(expr: sympy.Expr, **values: float) -> float:
    return float(expr.subs({sym(k): v for k, v in values.items()}))


H100_TILES = dict(gemm_tile_m=64, gemm_tile_n=128, sms=132)   # H100 SXM: 132 SMs
# One op: 1 kernel, 1 ms of memory time at datasheet bandwidth, 10 us of math, no
# collective; and the estimate's default efficiencies and fixed costs.
ONE_MEMORY_OP = {"time_s": 1e-3, "kernels": 1.0, "t_compute_s": 1e-5, "t_memory_s": 1e-3,
                 "t_comm_s": 0.0, "t_launch_s": 4e-6, "t_host_s": 0.0, "gemm_rows": 1.0,
                 "gemm_cols": 1.0, "gemm_groups": 1.0, "gemm_load": 1.0, "comm_latency_s": 0.0,
                 "ring_steps": 0.0}
DEFAULT_EFFS = {"eff_mem": 0.8, "eff_flops": 0.7, "eff_attn": 0.48, "eff_kv": 0.87,
                "eff_link": 0.8, "kernel_latency": 4.3e-6, "coll_latency": 0.0,
                "coll_step_latency": 0.0}


def _scale(m: float, n: float, groups: float = 1) -> float:
    f = tile_padding(sym("M"), sym("Nc"), sym("G"))
    return _num(f, M=m, Nc=n, G=groups, **H100_TILES)


def test_gemm_rows_pad_to_whole_tiles() -> None:
    # N = 4096: 32 column tiles of 128, no column padding.
    # 100 rows in tiles of 64: ceil(100/64) = 2 tiles = 128 rows, 128/100 = 1.28; 2 x 32 =
    # 64 tiles < 132 SMs: split-K in floor(132/64) = 2, 128 pieces in one wave of 132 SMs,
    # 132/128 = 1.03125 of it busy-or-idle: 1.28 x 1.03125 = 1.32.
    assert _scale(100, 4096) == pytest.approx(1.28 * 132 / 128, rel=1e-12)
    # decode at batch 8: one tile of 64 rows for 8 of them, 8x the FLOPs of the math
    # (32 tiles: split 4, 128 pieces, 132/128 again).
    assert _scale(8, 4096) == pytest.approx(8 * 132 / 128, rel=1e-12)
    # 128 rows: 2 x 32 = 64 tiles, no padding, only the wave's 4 idle SMs.
    assert _scale(128, 4096) == pytest.approx(132 / 128, rel=1e-12)


def test_a_gemms_waves_by_hand() -> None:
    # M = 512, N = 2176: 8 x 17 = 136 tiles of 64 x 128 on 132 SMs: 2 waves (264 tile
    # slots, 128 of the second idle): 264/136 = 1.94118.
    assert _scale(512, 2176) == pytest.approx(264 / 136, rel=1e-12)
    # 132 tiles exactly (M = 768: 12 row tiles x N = 1408: 11): one full wave, 1.
    assert _scale(768, 1408) == pytest.approx(1.0, rel=1e-12)
    # 67 tiles (M = 64, N = 8576 = 67 x 128): too many to split-K in two (floor(132/67)
    # = 1), one wave with 65 SMs idle: 132/67 = 1.97015.
    assert _scale(64, 8576) == pytest.approx(132 / 67, rel=1e-12)
    # 264 tiles (M = 1536: 24, N = 1408: 11): two full waves, 1.
    assert _scale(1536, 1408) == pytest.approx(1.0, rel=1e-12)


def test_grouped_expert_gemm_tiles_by_hand() -> None:
    # 4 experts of 16 rows each, N = 2048 (16 column tiles): 4 x 1 x 16 = 64 tiles, split
    # floor(132/64) = 2, 128 pieces in one wave: 132/128; rows pad 16 -> 64: 4x.
    assert _scale(16, 2048, groups=4) == pytest.approx(4 * 132 / 128, rel=1e-12)
    # 9 experts: 144 tiles > 132: two waves, 264/144; rows 4x: 7.3333.
    assert _scale(16, 2048, groups=9) == pytest.approx(4 * 264 / 144, rel=1e-12)


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
    zero = sympy.Integer(0)
    op = {"t_comm_s": call_time(node.comm, sympy.Integer(payload), links), **estimate_parts(node, links),
          "time_s": zero, "kernels": sympy.Integer(1), "t_compute_s": zero, "t_memory_s": zero,
          "t_host_s": zero, "t_launch_s": zero}
    values = dict(link_latency=2e-6, link_bw=450e9, coll_latency=3e-6, coll_step_latency=0.86e-6,
                  eff_link=0.8, kernel_latency=4.3e-6, nvls=0)
    # the 2 us floor + the engine's 3 us a call + 2(8-1) = 14 ring steps x 0.86 us
    # + 2 x 7/8 x 1 MiB / (0.8 x 450 GB/s) = 2 + 3 + 12.04 + 5.0972 us.
    want = 2e-6 + 3e-6 + 14 * 0.86e-6 + 1.75 * payload / (0.8 * 450e9)
    # (a collective's latency is its launch: no kernel_latency added)
    estimate = op_estimate(op, PARAMS, Kind(0, 1, 0), SYMBOLIC)
    assert _num(estimate, **values) == pytest.approx(want, rel=1e-12)
    # NVLink SHARP (nvls = 1): the switch sums, each GPU sends and receives its 1 MiB once:
    # 2 + 3 + 12.04 + 1 x 1 MiB / (0.8 x 450 GB/s) = 2 + 3 + 12.04 + 2.9127 us (latency
    # unchanged).
    want_nvls = 2e-6 + 3e-6 + 14 * 0.86e-6 + 1.0 * payload / (0.8 * 450e9)
    assert _num(estimate, **{**values, "nvls": 1}) == pytest.approx(want_nvls, rel=1e-12)


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


# Two made-up GPUs without a clock (no per-SM ceiling).
NO_CLOCK = {"sms": 132, "clock": 0.0, "mem_bw": 3.35e12}


def _synthetic(n: int, truth: dict[str, float],
               hardware: dict[str, dict[str, float]] | None = None,
               engines: dict[str, dict[str, float]] | None = None,
               tp: int = 1) -> list[cal.Prepared]:
    """Rows of made-up terms whose measurement is the estimate at `truth` (and each
    engine's own values in `engines`), on GPUs g1 and g2 (`hardware`: their sms, clock
    and mem_bw); at tp > 1 each row's last two ops are all-reduces over 2, 4 or tp GPUs
    (by row, so their ring steps vary)."""
    hardware = hardware or {"g1": NO_CLOCK, "g2": NO_CLOCK}
    engines = engines or {}
    rng = np.random.default_rng(7)
    rows = []
    for i in range(n):
        gpu, engine = ("g1", "g2")[i % 2], ("e1", "e2")[(i // 2) % 2]
        ops = 5
        terms = {k: np.zeros(ops) for k in cal.ESTIMATE_OP_KEYS}
        terms["t_compute_s"] = rng.uniform(0, 2e-3, ops)
        terms["t_memory_s"] = rng.uniform(0, 2e-3, ops)
        terms["kernels"] = rng.integers(1, 400, ops).astype(float)
        for k in ("gemm_rows", "gemm_cols", "gemm_groups", "gemm_load"):
            terms[k] = np.ones(ops)
        collective, group = np.zeros(ops), (2, 4, tp)[i % 3]
        if tp > 1:      # two all-reduces: 2 us floor, 2(n - 1) ring steps, some payload
            collective[3:] = 1.0
            terms["comm_latency_s"] = 2e-6 * collective
            terms["ring_steps"] = 2 * (group - 1) * collective
            terms["t_comm_s"] = collective * rng.uniform(2e-6, 2e-5, ops)
            for k in ("t_compute_s", "t_memory_s", "kernels"):   # small steps: latency shows
                terms[k] = np.ceil(terms[k] / 100) if k == "kernels" else terms[k] / 100
                terms[k] = terms[k] * (1 - collective)
        kind = cal.Kind((np.arange(ops) < 2).astype(float), collective, np.zeros(ops))  # 2 attention ops
        inputs = {k: float(v) for k, v in cal.ESTIMATE_DEFAULTS.items()}
        inputs.update(eff_mem=0.8, eff_flops=0.7, eff_link=0.8, **hardware[gpu])
        row = cal.Row(Span("synthetic", i + 1, 1, i + 1, 2), "s", gpu, "decode", None, engine,
                      {"B": 1, "N": 1, "T": 1, "tp": tp, "ep": 1, "pp": 1, "dp": 1}, 1.0)
        p = cal.Prepared(row, np.ones(ops), terms, kind, 0.0, 0.0, inputs)
        row_truth = {**truth, **engines.get(engine, {})}
        p.row = cal.Row(row.span, "s", gpu, "decode", None, engine, row.point,
                        float(p.estimate(row_truth)))
        rows.append(p)
    return rows


def test_the_regularised_fit_recovers_known_parameters() -> None:
    truth = {"eff_mem": 0.75, "eff_flops": 0.6, "eff_attn": 0.45, "eff_kv": 0.65, "eff_link": 0.8,
             "kernel_latency": 5e-6, "step_overhead": 2e-4, "request_overhead": 0.0}
    rows = _synthetic(60, truth)
    f = jf.fit_all(rows)
    got = f.values("g1", "e1")
    for name in ("eff_mem", "eff_flops", "eff_attn", "eff_kv", "kernel_latency"):
        assert got[name] == pytest.approx(truth[name], rel=0.05), name
    assert max(abs(e) for e in jf.row_errors(rows, f)) < 0.02
    assert jf.violations(f, jf.pairs_of(rows)) == []
    # A GPU held out gets the shared values: its offset is 0.
    assert f.values("unseen", "e1")["eff_mem"] == pytest.approx(
        math.exp(math.log(f.shared["eff_mem"]) + f.engine["e1"]["eff_mem"]))


def test_the_fit_recovers_each_engines_collective_step_latency() -> None:
    # An engine's collectives pay their own latency per ring step: NCCL's ring ~0.86 us
    # (the default), an engine's one-shot all-reduce inside a node far less, calls between
    # nodes more. Rows over 2, 4 and 8 GPUs (2, 6 and 14 ring steps a call) of e1 at
    # 0.3 us and e2 at 2 us: the fit finds both from how their rows grow with the steps.
    truth = {"eff_mem": 0.75, "eff_flops": 0.6, "eff_attn": 0.45, "eff_kv": 0.65, "eff_link": 0.8,
             "kernel_latency": 5e-6, "step_overhead": 2e-5, "request_overhead": 0.0}
    own = {"e1": {"coll_step_latency": 3e-7}, "e2": {"coll_step_latency": 2e-6}}
    rows = _synthetic(120, truth, engines=own, tp=8)
    f = jf.fit_all(rows)
    got = {e: f.values("g1", e)["coll_step_latency"] for e in own}
    assert got["e2"] == pytest.approx(2e-6, rel=0.05)
    # e1's steps are 1.2-8.4 us of a row's tens: the prior (0.86 us, sd 0.5 in ln) keeps
    # it a little above its truth, most of the way down from the default.
    assert 3e-7 < got["e1"] < 4.5e-7
    assert max(abs(e) for e in jf.row_errors(rows, f)) < 0.02
    # One-GPU rows have no collective: no engine offset for it, the default stays.
    coords, _, _ = jf._layout(_synthetic(8, truth))
    assert [c for c in coords if c[0] == "coll_step_latency"] == [("coll_step_latency", None, "shared")]


def test_the_fit_recovers_a_per_sm_ceiling() -> None:
    # Every row's engine streams at most 6 bytes per SM-cycle. On an A100-like GPU (108
    # SMs, 1410 MHz, 2039 GB/s) that is 108 x 1.41e9 x 6 / 2.039e12 = 0.448 of mem_bw,
    # below eff_mem 0.75: it binds. On a GDDR GPU like the RTX 4090 (128 SMs, 2520 MHz,
    # 1008 GB/s) it is 1.92: eff_mem binds. The fit starts the ceiling binding (its
    # default, 32, binds on neither) and finds both.
    truth = {"eff_mem": 0.75, "eff_flops": 0.6, "eff_attn": 0.45, "eff_kv": 0.65, "eff_link": 0.8,
             "kernel_latency": 5e-6, "step_overhead": 2e-4, "request_overhead": 0.0,
             "sm_bytes_per_cycle": 6.0}
    hardware = {"g1": {"sms": 108, "clock": 1.41e9, "mem_bw": 2.039e12},
                "g2": {"sms": 128, "clock": 2.52e9, "mem_bw": 1.008e12}}
    rows = _synthetic(60, truth, hardware)
    f = jf.fit_all(rows)
    for gpu in ("g1", "g2"):
        got = f.values(gpu, "e1")
        assert got["sm_bytes_per_cycle"] == pytest.approx(6.0, rel=0.05), gpu
        assert got["eff_mem"] == pytest.approx(0.75, rel=0.05), gpu
    assert max(abs(e) for e in jf.row_errors(rows, f)) < 0.02


def test_per_sm_ceiling_by_hand() -> None:
    # One memory-bound op: 1 kernel, 1 ms of memory time at datasheet bandwidth. On an
    # A100 (108 SMs, 1410 MHz, 2039 GB/s) at 5 bytes per SM-cycle the SMs pull
    # 108 x 1.41e9 x 5 = 761.4 GB/s = 0.37342 of mem_bw, below eff_mem 0.8: the op takes
    # 4.3 us + 1 ms / 0.37342. At 32 bytes (the default) they could pull 2.39 of mem_bw:
    # eff_mem binds (4.3 us + 1 ms / 0.8). With no clock (0) there is no ceiling.
    from infest.compiler.core.estimate_rule import NUMERIC
    pieces = ONE_MEMORY_OP
    params = {**DEFAULT_EFFS, "gemm_tile_m": 64, "gemm_tile_n": 128, "sms": 108,
              "clock": 1.41e9, "mem_bw": 2.039e12, "sm_bytes_per_cycle": 5.0}
    share = 108 * 1.41e9 * 5 / 2.039e12
    assert share == pytest.approx(0.37342, rel=1e-4)
    capped, free = 4.3e-6 + 1e-3 / share, 4.3e-6 + 1e-3 / 0.8
    norm = Kind.of("norm", False)

    def numeric(p: dict, kind: Kind = norm) -> float:
        return float(op_estimate(pieces, p, kind, NUMERIC))
    assert numeric(params) == pytest.approx(capped, rel=1e-12)
    # attention reads its KV cache under the same ceiling
    assert numeric(params, Kind.of("attention", False)) == pytest.approx(capped, rel=1e-12)
    assert numeric({**params, "sm_bytes_per_cycle": 32.0}) == pytest.approx(free, rel=1e-12)
    assert numeric({**params, "clock": 0.0}) == pytest.approx(free, rel=1e-12)
    # the symbolic rule (the forms, the workbook) gives the same
    op = {k: sympy.Float(v) for k, v in pieces.items()}
    symbolic = op_estimate(op, PARAMS, norm, SYMBOLIC)
    assert _num(symbolic, **params) == pytest.approx(capped, rel=1e-12)
    assert _num(symbolic, **{**params, "clock": 0}) == pytest.approx(free, rel=1e-12)


def test_every_admitted_measurement_is_at_or_above_its_overlap_floor() -> None:
    # bench/measurements.csv: no engine beats max(FLOPs / peak, bytes / bw, collectives).
    path = ROOT / "bench" / "measurements.csv"
    rows = cal.read_measurements(path)
    assert len(rows) >= 60 and len({r.hardware for r in rows}) >= 6
    for hw in sorted({r.hardware for r in rows}):
        for p in cal.prepare([r for r in rows if r.hardware == hw], hw, path.parent):
            assert p.floor_s <= p.row.step_s, p.row.span


def test_llama_8b_decode_b1_estimate_by_hand() -> None:
    # Eager engine on h100_sxm: effs 0.8 (HBM), 0.7 (math), kernel_latency 4.3 us. At B=1
    # a linear's one row pads to a 64-row tile: its math takes 64 x 2 FLOPs / (0.7 x 989
    # TFLOP/s) = 1.85e-13 s per weight, its memory 2 bytes / (0.8 x 3.35 TB/s) = 7.5e-13 s:
    # every op is memory bound (attention reads 2 KV bytes per 2 FLOPs too, at eff_kv 0.87),
    # and each op's kernels x 4.3 us + bytes / (eff x 3.35e12) beats its bound max(bytes /
    # 3.35e12, kernels x 4 us). So the step is kernels x 4.3 us + attention bytes / (0.87 x
    # 3.35e12) + the other bytes / (0.8 x 3.35e12), no collective at tp 1.
    result = _analysis("llama3_1_8b.arch", "h100_sxm", "decode").evaluate({"B": 1, "N": 4096})
    step = result["step"]
    attention = sum(o["count"] * o["bytes"] for o in result["ops"] if o["kind"] == "attention")
    # 32 layers x 4096 cached tokens x (K, V) x 8 heads x 128 x 2 bytes = 1 GiB of KV cache
    assert attention >= 32 * 4096 * 2 * 8 * 128 * 2
    expected = (step["kernels"] * 4.3e-6 + attention / (0.87 * 3.35e12)
                + (step["bytes"] - attention) / (0.8 * 3.35e12))
    assert step["estimate_s"] == pytest.approx(expected, rel=1e-12)
    assert step["tokens_per_s_estimate"] == pytest.approx(1 / expected, rel=1e-12)


def test_attention_reads_at_eff_kv_other_ops_at_eff_mem() -> None:
    # One op: 1 kernel, 1 ms of memory time, 10 us of math, no collective. Attention: 4.3 us
    # + max(10 us / eff_attn 0.48, 1 ms / eff_kv 0.87) = 4.3 us + 1149.425 us; any other
    # kind: 4.3 us + max(10 us / 0.7, 1 ms / eff_mem 0.8) = 4.3 us + 1250 us.
    pieces = ONE_MEMORY_OP
    params = {**DEFAULT_EFFS, **H100_TILES, "clock": 0.0, "mem_bw": 3.35e12,
              "sm_bytes_per_cycle": 32.0}
    from infest.compiler.core.estimate_rule import NUMERIC
    attention = op_estimate(pieces, params, Kind.of("attention", False), NUMERIC)
    other = op_estimate(pieces, params, Kind.of("norm", False), NUMERIC)
    assert float(attention) == pytest.approx(4.3e-6 + 1e-3 / 0.87, rel=1e-12)
    assert float(other) == pytest.approx(4.3e-6 + 1e-3 / 0.8, rel=1e-12)


def test_no_kernel_latency_b1_estimate_is_the_roofline_over_eff_mem() -> None:
    # Every op memory bound at B=1 (above), so with no launch floor, no kernel latency
    # and eff_mem = eff_kv = 0.5 the estimate is exactly twice the roofline (step bytes /
    # mem_bw).
    a = _analysis("llama3_1_8b.arch", "h100_sxm", "decode")
    step = a.evaluate({"B": 1, "N": 4096, "launch_overhead": 0, "kernel_latency": 0,
                       "eff_mem": 0.5, "eff_kv": 0.5})["step"]
    assert step["estimate_s"] == pytest.approx(2 * step["roofline_s"], rel=1e-12)


def test_ideal_parameters_give_the_launch_floored_time() -> None:
    # Efficiencies 1, no kernel latency and B = 64 (whole tiles): each op's estimate is
    # max(time_s, max(compute, memory)) = time_s.
    a = _analysis("llama3_1_8b.arch", "h100_sxm", "decode")
    step = a.evaluate({"B": 64, "N": 1024, "eff_mem": 1, "eff_flops": 1, "eff_link": 1,
                       "eff_attn": 1, "eff_kv": 1, "kernel_latency": 0})["step"]
    assert step["estimate_s"] == pytest.approx(step["time_s"], rel=1e-12)


@pytest.mark.parametrize("name, value", [("eff_mem", 0), ("eff_mem", 1.5), ("eff_attn", -0.2),
                                         ("kernel_latency", -1e-6)])
def test_estimate_parameters_out_of_range_are_refused(name: str, value: float) -> None:
    a = _analysis("llama3_1_8b.arch", "h100_sxm", "decode")
    with pytest.raises(SpecError, match=rf"{name}: the value must be"):
        a.evaluate({name: value})


def test_eff_in_a_hardware_file_is_checked(tmp_path: Path) -> None:
    hw = tmp_path / "slow.arch"
    hw.write_text('hardware slow "x" {\n  mem_capacity = 80 GB; mem_bw = 3 TB/s\n'
                  '  launch_overhead = 4 us; eff_mem = 1.2\n}\n')
    with pytest.raises(SpecError, match=r"'eff_mem' must be in \(0, 1\]"):
        analyze(LLAMA8, hw=str(hw))


def test_estimate_fields_in_a_hardware_file_are_used(tmp_path: Path) -> None:
    # eff_mem = eff_kv = 0.25, no launch floor, no kernel latency: 4x the roofline at B = 1.
    hw = tmp_path / "fast.arch"
    hw.write_text('hardware fast "x" {\n  mem_capacity = 80 GB; mem_bw = 3.35 TB/s\n'
                  '  flops_bf16 = 989 TFLOP/s; launch_overhead = 0 us; eff_mem = 0.25\n'
                  '  eff_kv = 0.25; kernel_latency = 0 us\n}\n')
    step = analyze(LLAMA8, hw=str(hw)).evaluate({"B": 1})["step"]
    assert step["estimate_s"] == pytest.approx(4 * step["roofline_s"], rel=1e-12)


@settings(derandomize=True, max_examples=60, deadline=None)
@given(model=st.sampled_from([m.name for m in MODELS]), hw=st.sampled_from(HARDWARE),
       phase=st.sampled_from(("decode", "prefill")), b=st.integers(1, 512),
       n=st.integers(1, 32768), tp=st.sampled_from((1, 2, 4, 8)),
       effs=st.tuples(*(st.floats(0.05, 1.0) for _ in range(4))))
def test_estimate_is_never_below_the_bound(model, hw, phase, b, n, tp, effs) -> None:
    a = _analysis(model, hw, phase)
    point = {"B": b * tp, "N": n, "tp": tp,
             **dict(zip(("eff_mem", "eff_flops", "eff_link", "eff_attn"), effs))}
    try:
        step = a.evaluate(point)["step"]
    except SpecError:
        return  # a layout the model refuses (tp must divide its heads, ...)
    assert step["estimate_s"] >= step["time_s"] * (1 - 1e-12)
    assert step["time_s"] >= step["roofline_s"] * (1 - 1e-12)
    # max of the step's sums <= the sum of each op's max: overlap never beats the floor
    assert step["roofline_s"] >= step["overlap_floor_s"] * (1 - 1e-12)
    assert step["overlap_floor_s"] == pytest.approx(max(step[k] for k in HARD_KEYS), rel=1e-12)
    assert step["tokens_per_s_estimate"] <= step["tokens_per_s"] * (1 + 1e-12)


def test_two_batch_overlap_hides_the_smaller_side_by_hand() -> None:
    from infest.compiler.core.estimate_rule import NUMERIC, step_estimate
    # 10 ms of ops, 3 of them collectives: full overlap runs the 3 behind the other 7.
    assert step_estimate(10.0, 3.0, 1.0, NUMERIC) == pytest.approx(7.0)
    assert step_estimate(10.0, 3.0, 0.5, NUMERIC) == pytest.approx(8.5)   # half of the 3
    # collectives the longer side (6 of 10): the 4 of compute hide behind them
    assert step_estimate(10.0, 6.0, 1.0, NUMERIC) == pytest.approx(6.0)
    assert step_estimate(10.0, 6.0, 0.0, NUMERIC) == 10.0                 # serial


@settings(derandomize=True, max_examples=30, deadline=None)
@given(model=st.sampled_from([m.name for m in MODELS]), phase=st.sampled_from(("decode", "prefill")),
       b=st.integers(1, 512), n=st.integers(1, 32768), tp=st.sampled_from((2, 4, 8)),
       overlap=st.floats(0.0, 1.0))
def test_overlap_never_beats_the_overlap_floor(model, phase, b, n, tp, overlap) -> None:
    # With comm_overlap > 0 the estimate may fall below the serial roofline (issue #22's
    # property holds at 0), never below the overlap floor; the bound is untouched.
    a = _analysis(model, "h100_sxm", phase)
    point = {"B": b * tp, "N": n, "tp": tp, "eff_mem": 1, "eff_flops": 1, "eff_link": 1,
             "eff_attn": 1, "eff_kv": 1, "kernel_latency": 0, "launch_overhead": 0}
    try:
        serial = a.evaluate(point)["step"]
        step = a.evaluate({**point, "comm_overlap": overlap})["step"]
    except SpecError:
        return  # a layout the model refuses
    assert step["estimate_s"] >= step["overlap_floor_s"] * (1 - 1e-12)
    assert step["estimate_s"] <= serial["estimate_s"] * (1 + 1e-12)
    assert step["roofline_s"] == serial["roofline_s"]
    if step["t_comm_s"] > 0 and overlap == 1.0:
        assert step["estimate_s"] < serial["estimate_s"]


def test_measured_ceilings_set_the_default_efficiencies() -> None:
    # h200_sxm carries mem_bw_measured = 4.3 TB/s beside mem_bw = 4.8 TB/s and
    # flops_bf16_measured = 790 beside flops_bf16 = 989 TFLOP/s: eff_mem = 4.3 / 4.8 =
    # 0.8958, eff_flops = 790 / 989 = 0.7988; eff_link has no measured field: 0.8.
    ins = _analysis("llama3_1_8b.arch", "h200_sxm", "decode").evaluate()["inputs"]
    assert ins["eff_mem"] == pytest.approx(4.3 / 4.8, rel=1e-12)
    assert ins["eff_flops"] == pytest.approx(790 / 989, rel=1e-12)
    assert ins["eff_link"] == 0.8


def _serve_engine(use: str):
    return Serving(_analysis("llama3_1_8b.arch", "h200_sxm", "decode"),
                   _analysis("llama3_1_8b.arch", "h200_sxm", "prefill"), use=use)


@pytest.mark.parametrize("batching", ["static", "continuous"])
def test_serve_uses_the_estimate_or_the_bound(batching: str) -> None:
    request = Request(2048, 65, 8, batching, 512)
    bound = serve(_serve_engine("bound"), request, {})
    estimate = serve(_serve_engine("estimate"), request, {})
    # --use bound: the metrics are the bound's; the bound column is the same either way.
    assert bound["tpot_s"] == bound["bound"]["tpot_s"] == estimate["bound"]["tpot_s"]
    assert estimate["tpot_s"] > bound["tpot_s"] and estimate["ttft_s"] > bound["ttft_s"]
    # Efficiencies of 1, no launch floor, no kernel or ring-step latency and tiles of one
    # row in 10^9: the estimate is the bound, mixed steps too (their GEMMs' rows are
    # fractional means, so a tile pads them by at most 1e-9 rows).
    ideal = {"eff_mem": 1, "eff_flops": 1, "eff_link": 1, "eff_attn": 1, "eff_kv": 1,
             "launch_overhead": 0, "kernel_latency": 0, "coll_step_latency": 0, "gemm_tile_m": 1e-9,
             "gemm_tile_n": 1e-9}
    same = serve(_serve_engine("estimate"), request, ideal)
    assert same["tpot_s"] == pytest.approx(same["bound"]["tpot_s"], rel=1e-9)
    assert _bare_ttft(same) == pytest.approx(same["bound"]["ttft_s"], rel=1e-9)


def _bare_ttft(r: dict) -> float:
    """The estimate's TTFT without the closed loop's queueing, which only the estimate
    adds (compiler/analyses/arrivals.py; static batching has none)."""
    q = r.get("queueing") or {}
    return r["ttft_s"] - sum(q.get(f"{k}_s", 0.0) for k in QUEUE_KEYS)


@pytest.mark.parametrize("batching", ["static", "continuous"])
def test_step_and_request_overheads_reach_serve(batching: str) -> None:
    # A step overhead of 1 ms lengthens every step: under continuous batching TPOT by
    # exactly 1 ms (each token one step), TTFT by ttft_steps ms; the request overhead
    # adds to TTFT once. The bound moves by neither.
    request = Request(2048, 65, 8, batching, 512)
    base = serve(_serve_engine("estimate"), request, {})
    more = serve(_serve_engine("estimate"), request, {"step_overhead": 1e-3, "request_overhead": 0.02})
    assert more["tpot_s"] - base["tpot_s"] == pytest.approx(1e-3, rel=1e-6)
    steps = base["schedule"]["ttft_steps"] if batching == "continuous" else 1
    assert _bare_ttft(more) - _bare_ttft(base) == pytest.approx(0.02 + steps * 1e-3, rel=1e-6)
    assert more["bound"] == base["bound"]


def test_cli_use_flag(capsys) -> None:
    from infest.exports.cli.main import main
    args = ["serve", "llama3_1_8b", "--hw", "h200_sxm", "--isl", "128", "--osl", "9",
            "--concurrency", "4", "--json"]
    assert main(args + ["--use", "bound"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["use"] == "bound" and r["tpot_s"] == r["bound"]["tpot_s"]
    with pytest.raises(SystemExit) as exc:  # bad arguments: argparse's error, exit 1
        main(args + ["--use", "guess"])
    assert exc.value.code == 1
    assert "invalid choice: 'guess'" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["llama3_1_8b", "qwen3_30b_a3b"])
def test_a_mixed_step_without_prompt_tokens_is_the_pure_decode_step(spec: str) -> None:
    # continuous.py combines a mixed step op by op (MIXED_RULES, ESTIMATE_RULES): with an
    # empty prompt part it must be the forms' own decode step, estimate and bound, for a
    # dense model (its LM head's rows are the sequences, not the tokens) and an MoE (an
    # empty part's expert rows are 0, not 0/0).
    from infest.compiler.analyses.continuous import mixed_step, point_forms
    a = analyze(spec, hw="h200_sxm")
    forms = point_forms(a.runner, {i.name: float(i.value) for i in a.runner.inputs({}, checked=False)})
    for d in (3.0, 30.0, 100.0):
        pure = forms({"B": np.array(d), "T": np.array(1.0), "N": np.array(1100.0)})
        empty = forms({"B": np.array(0.0), "T": np.array(0.0), "N": np.array(0.0)})
        total = forms({"B": np.array(1.0), "T": np.array(d), "N": np.array(0.0)})
        mixed = mixed_step(a.runner, [pure, empty], total)
        for key in ("estimate_s", "roofline_s"):
            assert float(mixed[key]) == pytest.approx(float(pure[f"step.{key}"]), rel=1e-12), (d, key)


def _gemm_shapes(overrides: dict) -> dict[str, tuple[float, float, float]]:
    runner = analyze("mixtral_8x7b", hw="h200_sxm").runner
    v = runner({i.name: float(i.value) for i in runner.inputs(overrides)})
    return {op.name: tuple(float(v[f"ops.{i}.{k}"]) for k in ("gemm_rows", "gemm_cols", "gemm_groups"))
            for i, op in enumerate(runner.ops) if op.kind in ("linear", "router")}


def test_a_gemms_columns_and_groups_on_one_gpu() -> None:
    # Mixtral (hidden 4096, 8 kv heads x 128, experts of ffn 14336, top-2 of 8) at B = 8.
    tp2 = _gemm_shapes({"B": 8, "tp": 2, "ep": 1})
    assert tp2["q"][1] == 4096 / 2 and tp2["k"][1] == 1024 / 2   # column-parallel: N / tp
    assert tp2["o"][1] == 4096                                    # row-parallel: K split
    assert tp2["logits"][1] == 32000 / 2                          # vocab-parallel head
    # ep = 1: every expert split 2 ways, its up/gate by columns, its down by rows.
    assert tp2["g"][1] == 14336 / 2 and tp2["d"][1] == 4096
    # 8 tokens x top-2 of 8 experts touch 8 x (1 - (6/8)^8) = 7.19909 experts, each with
    # 16 / 7.19909 = 2.22250 rows; every GPU holds a slice of each.
    touched = 8 * (1 - 0.75 ** 8)
    assert tp2["g"][2] == pytest.approx(touched, rel=1e-12)
    assert tp2["g"][0] == pytest.approx(16 / touched, rel=1e-12)
    # ep = 2: whole experts, 4 per GPU: N = 14336, half the touched experts on each.
    ep2 = _gemm_shapes({"B": 8, "tp": 2, "ep": 2})
    assert ep2["g"][1] == 14336 and ep2["g"][2] == pytest.approx(touched / 2, rel=1e-12)
    assert ep2["q"][2] == 1.0


def test_an_engine_build_adds_its_offset_to_its_familys(monkeypatch) -> None:
    # Offsets add in ln: shared eff_mem 0.5, family e1 x 1.2, its build e2 x 1.1, GPU g x 0.9:
    # e2 on g = 0.5 x 0.9 x 1.2 x 1.1 = 0.594; e1 on g = 0.5 x 0.9 x 1.2 = 0.54; a build never
    # fitted (e3, of e1) gets its family's 0.54; an engine of no family, unseen, 0.45.
    monkeypatch.setattr(jf, "_families", lambda: {"e2": "e1", "e3": "e1"})
    f = jf.Fit({"eff_mem": 0.5}, {"g": {"eff_mem": math.log(0.9)}},
               {"e1": {"eff_mem": math.log(1.2)}, "e2": {"eff_mem": math.log(1.1)}}, 0.0)
    assert f.values("g", "e2")["eff_mem"] == pytest.approx(0.594, rel=1e-12)
    assert f.values("g", "e1")["eff_mem"] == pytest.approx(0.54, rel=1e-12)
    assert f.values("g", "e3")["eff_mem"] == pytest.approx(0.54, rel=1e-12)
    assert f.values("g", "other")["eff_mem"] == pytest.approx(0.45, rel=1e-12)


def test_a_build_held_out_is_predicted_from_its_family(monkeypatch) -> None:
    # e2 is a build of e1 (its family): fitted without any e2 row, e2's rows get e1's fitted
    # values, which recover the truth both share, so their error stays small.
    monkeypatch.setattr(jf, "_families", lambda: {"e2": "e1"})
    truth = {"eff_mem": 0.75, "eff_flops": 0.6, "eff_attn": 0.45, "eff_kv": 0.65, "eff_link": 0.8,
             "kernel_latency": 5e-6, "step_overhead": 2e-4, "request_overhead": 0.0}
    rows = _synthetic(60, truth)
    f = jf.fit_all([p for p in rows if p.row.engine == "e1"])
    assert "e2" not in f.engine
    for p in (p for p in rows if p.row.engine == "e2"):
        assert f.values(p.row.hardware, "e2") == f.values(p.row.hardware, "e1")
        assert abs(float(p.estimate(f.values(p.row.hardware, "e2"))) / p.row.step_s - 1) < 0.02


def test_shipped_builds_name_their_family() -> None:
    # vLLM's ROCm build and SGLang's eras and ROCm build pool with their engine; the others
    # are their own family.
    families = {name: p.family for name, p in load_profiles().items()}
    assert families["vllm-rocm"] == "vllm"
    assert {families[n] for n in ("sglang-0.4", "sglang-2025", "sglang-rocm")} == {"sglang"}
    assert families["trtllm"] == "trtllm" and families["sglang"] == "sglang"


def test_a_profile_family_that_is_not_a_name_is_an_error(tmp_path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"name": "x", "family": 3, "fields": {}}')
    with pytest.raises(SpecError, match="'family' must be an engine name"):
        read_profile(path)


def test_the_fp8_kv_bench_spec_halves_deepseeks_latent_cache() -> None:
    # bench/specs/deepseek_v3_kvfp8.arch (the InferenceX runs' --kv-cache-dtype fp8_e4m3):
    # 61 layers x (kv_lora_rank 512 + rope 64) x 1 byte = 35,136 bytes a token, half the
    # shipped bf16 spec's 61 x 576 x 2 = 70,272; the weights are the same.
    point = {"B": 1, "N": 1024}
    fp8 = analyze(ROOT / "bench" / "specs" / "deepseek_v3_kvfp8.arch", hw="b200",
                  phase="decode").evaluate(point)["memory"]
    bf16 = _analysis("deepseek_v3.arch", "b200", "decode").evaluate(point)["memory"]
    assert fp8["kv_bytes_per_token"] == 61 * 576 * 1
    assert bf16["kv_bytes_per_token"] == 61 * 576 * 2
    assert fp8["weights_bytes"] == bf16["weights_bytes"]


def test_a_family_naming_no_profile_is_an_error(tmp_path) -> None:
    # A typo in "family" would pool a build with nothing: the folder's load says which file.
    (tmp_path / "vllm.json").write_text('{"name": "vllm", "fields": {}}')
    (tmp_path / "vllm-rocm.json").write_text('{"name": "vllm-rocm", "family": "vlm", "fields": {}}')
    with pytest.raises(SpecError, match="family 'vlm' names no engine profile") as exc:
        load_profiles(tmp_path)
    assert exc.value.diagnostics[0].span.file.endswith("vllm-rocm.json")
