"""Fit the estimate's per-kernel defaults to aiconfigurator's measured kernel tables.

    python bench/kernel_fit.py

bench/kernels/*.csv are extracts of aiconfigurator-core 0.12.0's perf database
(TensorRT-LLM 1.3.0rc20 kernels on H100 and H200 SXM; each row names its parquet file
and the package version). Four fits, each printed with its residuals:
- memory-bound GEMMs (bf16, M <= 128): latency = t0 + weight bytes / (eff x HBM bw), the
  source of `kernel_latency` (t0) and the memory efficiency of a weight read;
- NCCL all-reduce at small messages (<= 64 KiB): latency = a + b x 2(n - 1), the source
  of `coll_step_latency` (b) and of `coll_latency` (a less the hardware's 2 us
  `link_latency`, the bound's per-call floor: below the fastest all-reduce of the tables,
  TensorRT-LLM's custom one, also printed);
- context (prefill) attention at 4k tokens or more: FLOPs / (latency x peak), the source
  of `eff_attn`;
- generation (decode) attention reading over 500 MB of KV cache: KV bytes / (latency x
  HBM bandwidth), the source of `eff_kv` (smaller reads are latency: kernel_latency's).
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent / "kernels"
HBM = {"h100_sxm": 3.35e12, "h200_sxm": 4.8e12}
PEAK_BF16 = 989e12


def _rows(name: str) -> list[dict]:
    with open(HERE / name) as f:
        return list(csv.DictReader(f))


def gemm_fit() -> tuple[float, float, float]:
    """(t0 s, eff, worst relative residual) over bf16 GEMMs with M <= 128."""
    rows = [r for r in _rows("gemm_bf16.csv") if int(r["M"]) <= 128]
    seconds = np.array([float(r["latency_us"]) * 1e-6 for r in rows])
    read = np.array([int(r["N"]) * int(r["K"]) * 2 / HBM[r["system"]] for r in rows])
    (t0, inv_eff), *_ = np.linalg.lstsq(np.c_[np.ones_like(read), read], seconds, rcond=None)
    fit = t0 + inv_eff * read
    return float(t0), float(1 / inv_eff), float(np.max(np.abs(fit / seconds - 1)))


def allreduce_fit() -> tuple[float, float, float]:
    """(per-call latency s, per-ring-step latency s, worst residual), NCCL, <= 64 KiB."""
    rows = [r for r in _rows("allreduce.csv")
            if r["impl"] == "nccl_all_reduce" and int(r["message_bytes"]) <= 65536]
    seconds = np.array([float(r["latency_us"]) * 1e-6 for r in rows])
    steps = np.array([2 * (int(r["num_gpus"]) - 1) for r in rows], dtype=float)
    (a, b), *_ = np.linalg.lstsq(np.c_[np.ones_like(steps), steps], seconds, rcond=None)
    return float(a), float(b), float(np.max(np.abs((a + b * steps) / seconds - 1)))


def fastest_allreduce() -> float:
    """The least latency of any all-reduce in the tables (NCCL's or TensorRT-LLM's own)."""
    return min(float(r["latency_us"]) * 1e-6 for r in _rows("allreduce.csv"))


def attention_fit() -> tuple[float, float, float]:
    """(median, lowest, highest) share of the bf16 peak, context attention at >= 4k tokens."""
    shares = [float(r["pct_of_989_tflops"]) / 100 for r in _rows("context_attention_llama8b_shape.csv")
              if int(r["isl"]) >= 4096]
    return float(np.median(shares)), min(shares), max(shares)


def kv_read_fit() -> tuple[float, float, float]:
    """(median, lowest, highest) share of HBM bandwidth, generation attention over 500 MB."""
    shares = [float(r["pct_of_hbm_bw"]) / 100
              for r in _rows("generation_attention_llama8b_shape.csv") if float(r["kv_bytes_MB"]) > 500]
    return float(np.median(shares)), min(shares), max(shares)


def shipped_floor(hw: str = "h200_sxm") -> float:
    """The shipped hardware's per-call floor, `link_latency` (specs/hardware/)."""
    from infest.compiler.api import load_hardware
    return float(load_hardware(hw).fields["link_latency"].value)


def main() -> None:
    """Print each fit."""
    floor = shipped_floor()
    t0, eff, worst = gemm_fit()
    print(f"GEMM M<=128: kernel_latency {t0 * 1e6:.2f} us, weight-read efficiency {eff:.3f} "
          f"(worst residual {worst:.1%})")
    a, b, worst = allreduce_fit()
    print(f"NCCL all-reduce <=64 KiB: per call {a * 1e6:.2f} us + {b * 1e6:.2f} us x 2(n-1) "
          f"(worst residual {worst:.1%}): coll_latency {(a - floor) * 1e6:.2f} us above the "
          f"{floor * 1e6:g} us link_latency")
    fastest = fastest_allreduce()
    print(f"fastest all-reduce of the tables: {fastest * 1e6:.3f} us (link_latency "
          f"{floor * 1e6:g} us must stay below it)")
    med, lo, hi = attention_fit()
    print(f"context attention >=4k tokens: eff_attn median {med:.3f} (range {lo:.3f}-{hi:.3f})")
    med, lo, hi = kv_read_fit()
    print(f"generation attention > 500 MB of KV: eff_kv median {med:.3f} (range {lo:.3f}-{hi:.3f})")


if __name__ == "__main__":
    main()
