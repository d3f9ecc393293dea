"""Bounds stay bounds (issue #10, item 1): tokens_per_s comes from the serial-kernel bound
(roofline_s: datasheet peaks, kernels one after another, no launch cost), under it lies
the overlap floor (issue #22: what an engine that overlaps kernels cannot beat), and
what-if zeros that make physical sense (latencies) are accepted while rates and
capacities stay positive."""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.load.fields import MAY_BE_ZERO
from infest.dsl.errors import SpecError

ROOT = Path(__file__).parents[1]
LLAMA = ROOT / "specs" / "models" / "llama3_1_8b.arch"


@pytest.fixture(scope="module")
def llama():
    return analyze(LLAMA, hw="h100_sxm")


def test_tokens_per_s_is_the_serial_kernel_bound(llama) -> None:
    step = llama.evaluate({"B": 8, "N": 4096})["step"]
    # B*T = 8 tokens per step over the roofline, not over the launch-inclusive time.
    assert step["tokens_per_s"] == pytest.approx(8 / step["roofline_s"], rel=1e-12)
    # 419 kernels x 4 us: the launch floor lifts time_s above the roofline at B=8.
    assert step["time_s"] > step["roofline_s"]
    assert step["tokens_per_s"] > 8 / step["time_s"]


def test_batch_one_throughput_is_bandwidth_over_bytes(llama) -> None:
    # At B=1 every op is memory bound (a matmul does 2 FLOPs per 2-byte weight: intensity
    # ~1 FLOP/byte, far below the H100 ridge 989e12 / 3.35e12 ~ 295), so the roofline is
    # step bytes / mem_bw and the hard bound on throughput is mem_bw / step bytes.
    step = llama.evaluate({"B": 1, "N": 4096})["step"]
    assert step["tokens_per_s"] == pytest.approx(3.35e12 / step["bytes"], rel=1e-9)


def test_launch_overhead_zero_is_a_what_if(llama) -> None:
    r = llama.evaluate({"B": 1, "N": 4096, "launch_overhead": 0})
    step = r["step"]
    assert r["inputs"]["launch_overhead"] == 0
    assert step["t_launch_s"] == 0
    assert step["time_s"] == pytest.approx(step["roofline_s"], rel=1e-12)
    assert step["bound"] == "weights"  # a zero launch term never binds
    assert all(op["bound"] != "launch" for op in r["ops"])


def test_link_latency_zero_leaves_the_bandwidth_term() -> None:
    a = analyze(LLAMA, hw="h100_sxm")
    r = a.evaluate({"B": 1, "N": 4096, "tp": 2, "link_latency": 0})
    reduce = next(op for op in r["ops"] if op["kind"] == "all_reduce")
    # Ring all-reduce over 2 GPUs: 2*(g-1)/g = 1 x payload / 450 GB/s, no latency.
    assert reduce["t_comm_s"] == pytest.approx(reduce["bytes"] / 450e9, rel=1e-12)


def test_may_be_zero_is_declared_once() -> None:
    # latencies, the offload inputs (no expert resident, no measured hits), peaks a GPU
    # may lack (all but bf16, where every fallback ends), measured ceilings left blank, an
    # absent network, the estimate's fixed costs and routing skew (0: switched off,
    # perfectly balanced), its overlap of collectives (0: serial), a GPU's clock (0:
    # none published, no per-SM ceiling), NVLink SHARP (0: ring all-reduce only) and the
    # memory an engine keeps back (0: none)
    assert MAY_BE_ZERO == {"launch_overhead", "link_latency", "net_latency", "gpu_experts",
                           "hit_rate", "flops_fp16", "flops_fp8", "flops_fp4", "flops_int8",
                           "flops_tf32", "flops_fp32", "mem_bw_measured",
                           "flops_bf16_measured", "net_bw", "kernel_latency", "step_overhead",
                           "request_overhead", "coll_latency", "coll_step_latency", "moe_skew",
                           "comm_overlap", "clock", "nvls", "mem_reserve"}


@pytest.mark.parametrize("name", ["mem_bw", "flops_bf16", "mem_capacity", "link_bw", "B", "N"])
def test_rates_capacities_and_sizes_stay_positive(llama, name: str) -> None:
    with pytest.raises(SpecError, match=f"--set {name}: the value must be positive"):
        llama.evaluate({name: 0})


def test_negative_latency_is_refused(llama) -> None:
    with pytest.raises(SpecError, match="launch_overhead: the value must be 0 or more"):
        llama.evaluate({"launch_overhead": -1})


def test_hardware_file_may_state_a_zero_latency(tmp_path: Path) -> None:
    hw = tmp_path / "graphs.arch"
    hw.write_text('hardware graphs "no launch cost" {\n  mem_capacity = 80 GB; '
                  'mem_bw = 3.35 TB/s; flops_bf16 = 989 TFLOP/s\n  launch_overhead = 0 us\n}\n')
    step = analyze(LLAMA, hw=hw).evaluate({"B": 1})["step"]
    assert step["time_s"] == step["roofline_s"]


def test_overlap_floor_by_hand(tmp_path: Path) -> None:
    # A memory-bound embed beside a compute-bound linear: overlapping them beats running
    # them one after another, never the largest resource total.
    spec = tmp_path / "m.arch"
    spec.write_text("model m {\n  hidden = 4096\n  x = embed(tokens, 100 -> hidden)\n"
                    "  y = linear(x, hidden -> hidden)\n}\n")
    step = analyze(spec, hw="h100_sxm").evaluate(
        {"B": 4096, "mem_bw": 10**12, "flops_bf16": 10**15})["step"]
    # embed: 4096 rows x 4096 x 2 B read + 4096 x 4096 x 2 B written = 67,108,864 B, 0 FLOP
    #   -> 67.108864 us at 1 TB/s
    # linear: 2 x 4096 x 4096 x 4096 = 137,438,953,472 FLOP -> 137.438953472 us at 1 PFLOP/s;
    #   4096 x 4096 x 2 B weights + 4096 x (4096 + 4096) x 2 B activations = 100,663,296 B
    #   -> 100.663296 us: compute bound
    # serial kernels: 67.108864 + 137.438953472 = 204.547817472 us
    assert step["roofline_s"] == pytest.approx(204.547817472e-6, rel=1e-12)
    # overlapped: max(137.438953472 us of math, 67.108864 + 100.663296 = 167.77216 us of HBM)
    assert step["overlap_floor_s"] == pytest.approx(167.77216e-6, rel=1e-12)


def test_at_batch_one_the_floor_is_the_roofline(llama) -> None:
    # every op memory bound, no collectives: both are step bytes / mem_bw
    step = llama.evaluate({"B": 1, "N": 4096})["step"]
    assert step["overlap_floor_s"] == pytest.approx(step["bytes"] / 3.35e12, rel=1e-12)
    assert step["overlap_floor_s"] == pytest.approx(step["roofline_s"], rel=1e-12)


# aiconfigurator 0.12.0's measured all-reduces (aiconfigurator-core's perf database: NCCL
# and TensorRT-LLM 1.3.0rc20's custom all-reduce on 2, 4 and 8 H100 / H200 SXM, 256 B to
# 1 GiB; each row of the extract names its parquet file).
ALLREDUCE = ROOT / "bench" / "kernels" / "allreduce.csv"


def _bound_call(hw: str, gpus: int, payload: int, **override: float) -> float:
    """The bound's seconds for one all-reduce inside a node of the shipped `hw` (with
    `override`s of its fields, as --set gives them)."""
    import sympy

    from infest.compiler.api import load_hardware
    from infest.compiler.core.symbols import sym
    from infest.compiler.passes.collectives import Collective, Links, call_time
    values = {k: v.value for k, v in load_hardware(hw).fields.items()}
    values.update({k: sympy.Rational(str(v)) for k, v in override.items()})
    t = call_time(Collective("all_reduce", sympy.Integer(gpus)), sympy.Integer(payload),
                  Links(net=False))
    return float(t.subs({sym(k): sympy.Rational(str(v)) for k, v in values.items()}))


def test_no_measured_all_reduce_beats_the_bound() -> None:
    import csv
    with open(ALLREDUCE) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 264
    ratios = [float(r["latency_us"]) * 1e-6
              / _bound_call(r["system"], int(r["num_gpus"]), int(r["message_bytes"]))
              for r in rows]
    assert min(ratios) >= 1.0
    # the fastest: TensorRT-LLM's custom all-reduce of 512 B on 2 H200s, 2.619 us, against
    # 2 us + 512 B / 450 GB/s = 2.0011 us
    assert min(ratios) == pytest.approx(2.619e-6 / (2e-6 + 512 / 450e9), rel=1e-9)
    # NVLink SHARP is what keeps 1 GiB on 8 H200s a bound: TensorRT-LLM measured 4003.1 us,
    # under a ring's 2 us + 2 x 7/8 x 2^30 B / 450 GB/s = 4177.7 us (nvls = 0); the
    # switch's 2 us + 2^30 B / 450 GB/s = 2388.1 us is under it.
    gib = next(float(r["latency_us"]) * 1e-6 for r in rows if r["system"] == "h200_sxm"
               and r["num_gpus"] == "8" and r["message_bytes"] == str(1 << 30))
    ring = _bound_call("h200_sxm", 8, 1 << 30, nvls=0)
    assert ring == pytest.approx(2e-6 + 1.75 * 2**30 / 450e9, rel=1e-12)
    assert gib == pytest.approx(4003.059e-6) and gib < ring
    assert _bound_call("h200_sxm", 8, 1 << 30) == pytest.approx(2e-6 + 2**30 / 450e9, rel=1e-12)
