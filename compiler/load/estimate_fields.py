"""The estimate's own parameters: one delimited list of fields (name, unit, default, source).

Each is an input like any hardware field: a hardware file, an engine profile
(specs/engines/*.json) or `--set` gives it a value; otherwise the default below applies
and `eval --json` lists it under "inputs". They enter the estimate only
(compiler/forms/estimate.py), never a bound. Defaults are fitted to aiconfigurator 0.12.0's
kernel tables (aiconfigurator-core 0.12.0, TensorRT-LLM 1.3.0rc20 perf database, H100 and
H200 SXM; bench/kernel_fit.py writes the numbers and their residuals), except where a
source says otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from infest.dsl.units import COUNT, TIME


@dataclass(frozen=True)
class EstimateField:
    """One parameter of the estimate: its unit, documented default and where that comes from."""

    name: str
    dimension: str
    default: Fraction
    doc: str
    source: str
    share: bool = False      # an efficiency: in (0, 1]
    may_be_zero: bool = True  # a fixed cost or a skew: 0 switches the effect off


# ---- the field entries (move into the one field table as they are) -----------------------
ESTIMATE_FIELDS = (
    EstimateField("kernel_latency", TIME, Fraction(43, 10_000_000),
                  "fixed time each kernel adds in the estimate (launch, ramp-up, tail)",
                  "aiconfigurator 0.12.0 bf16 GEMMs at M <= 128 on H100/H200: latency = "
                  "4.3 us + weight bytes / (0.82 x HBM bandwidth), worst residual 14% "
                  "(bench/kernel_fit.py)"),
    EstimateField("step_overhead", TIME, Fraction(0),
                  "per-step engine overhead: scheduling, sampling, host work (step.t_overhead_s)",
                  "0 unless an engine profile sets it (DESIGN: never part of a floor)"),
    EstimateField("request_overhead", TIME, Fraction(0),
                  "per-request overhead added to TTFT (tokenising, admission, first stream)",
                  "0 unless an engine profile sets it"),
    EstimateField("eff_attn", COUNT, Fraction(12, 25),
                  "achievable share of peak FLOP/s of attention kernels (FlashAttention class)",
                  "aiconfigurator 0.12.0 context attention, 32/8 heads d128 bf16: median 48% "
                  "(41-55%) of 989 TFLOP/s at 4k-16k tokens, H100 and H200 (bench/kernel_fit.py)", share=True, may_be_zero=False),
    EstimateField("gemm_tile_m", COUNT, Fraction(64),
                  "GEMM tile rows: M rows pad up to a whole number of tiles (decode's M = batch)",
                  "Hopper wgmma: 64 rows per warpgroup MMA, the smallest tile CUTLASS and "
                  "cuBLAS use", may_be_zero=False),
    EstimateField("moe_skew", COUNT, Fraction(1),
                  "routing skew: scales the busiest expert-parallel rank's excess load over "
                  "the mean (1: uniform routing; 0: perfectly balanced)",
                  "DOMAIN: busiest of E binomial loads ~ mean + sqrt(2 mean ln E)"),
    EstimateField("coll_step_latency", TIME, Fraction(86, 100_000_000),
                  "latency of each ring step of a collective (all-reduce: 2(n-1) steps)",
                  "aiconfigurator 0.12.0 NCCL all-reduce <= 64 KiB on H100/H200 at 2, 4, 8 "
                  "GPUs: 5.0 us + 0.86 us x 2(n-1), worst residual 16% (bench/kernel_fit.py)"),
)
# ------------------------------------------------------------------------------------------
ESTIMATE_DEFAULTS = {f.name: f.default for f in ESTIMATE_FIELDS}
BY_NAME = {f.name: f for f in ESTIMATE_FIELDS}
