"""The serving model against published serving benchmarks (bench/serving_benchmarks.csv).

    python bench/serving_check.py [--markdown]

Rows (each with its source URL and notes in the CSV, copied from the sources unchanged):

- NVIDIA NIM 1.8.0, Llama 3.3 70B fp8 TP2 on 2 x H100 80G, fixed ISL 5000 / OSL 500 (and
  500 / 2000 at C=1), closed loop at concurrency 1 .. 250: `infest serve --concurrency C`
  on bench/specs/llama3_1_70b_fp8.arch (the Llama 3.3 70B shape), h100_sxm, tp=2, the
  graphs engine (NIM runs CUDA graphs) with TensorRT-LLM's KV share (kv_free_fraction 0.9),
  measured TTFT and ITL (= TPOT at fixed OSL) and
  output tokens/s against the model's.
- SGLang (datacrunch-research/h200-benchmarks), Llama 3.3 70B bf16 TP4 on 4 x H200,
  Poisson arrivals at 1, 2, 4, 8, 16 requests/s, random lengths whose means were 509 in
  and 534 out (total tokens / completed requests, in the notes): `infest serve --rps R`
  at those means (the lengths varied; the model takes fixed ones), its median TTFT and
  median ITL (only medians were kept) against the model's means and the model's
  saturation against the measured one (between 4 and 8 requests/s E2E quadruples).

Printed, not asserted: the model is uncalibrated here (default efficiencies).
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "bench" / "serving_benchmarks.csv"
FP8 = ROOT / "bench" / "specs" / "llama3_1_70b_fp8.arch"
BF16 = ROOT / "specs" / "models" / "llama3_1_70b.arch"
MEAN_LENGTHS = (509, 534)     # the SGLang random rows: total tokens / completed (notes)
# NIM runs TensorRT-LLM, whose KV cache takes 0.9 of the memory free beside the weights
# (KvCacheConfig.free_gpu_memory_fraction's default; specs/engines/trtllm.json): its admission.
NIM_KV_SHARE = {"kv_free_fraction": 0.9}


def engine(spec: Path, hw: str):
    from infest.compiler.analyses.serve import Serving
    from infest.compiler.backend.cache import cached_runner
    return Serving(*(cached_runner(spec, hw, phase=p, engine="graphs")
                     for p in ("decode", "prefill")))


def closed_rows(rows: list[dict]) -> list[list[str]]:
    """NIM: the closed loop at each concurrency."""
    from infest.compiler.analyses.serve import Request, serve
    eng = engine(FP8, "h100_sxm")
    out = []
    for r in rows:
        c, isl, osl = int(r["load"]), int(r["isl"]), int(r["osl"])
        m = serve(eng, Request(isl, osl, c), {"tp": 2, **NIM_KV_SHARE})
        out.append([f"NIM C={c} {isl}/{osl}", _ms(r["ttft_mean_s"]), _ms(m["ttft_s"]),
                    _ms(r["itl_mean_s"]), _ms(m["tpot_s"]), r["output_tokens_per_s"] or "",
                    f"{m['tokens_per_s']:.0f}", "no"])
    return out


def open_rows(rows: list[dict]) -> list[list[str]]:
    """SGLang: the open loop at each rate (its medians against the model's means)."""
    from infest.compiler.analyses.serve import Request
    from infest.compiler.analyses.serve_open import OpenLoad, serve_open
    eng = engine(BF16, "h200_sxm")
    out = []
    for r in rows:
        rate = float(r["load"])
        m = serve_open(eng, Request(*MEAN_LENGTHS, None), OpenLoad(rate), {"tp": 4})
        notes = r["notes"]
        ttft, itl = (float(re.search(rf"{k}=([0-9]+(?:\.[0-9]+)?)", notes).group(1)) / 1e3
                     for k in ("median_ttft_ms", "median_itl_ms"))
        out.append([f"SGLang R={rate:g}/s", _ms(ttft) + " (median)", _ms(m["ttft_s"]),
                    _ms(itl) + " (median)", _ms(m["tpot_s"]), f"{float(r['output_tokens_per_s']):.0f}",
                    f"{m['tokens_per_s']:.0f}",
                    f"yes (rho {m['utilisation']:.2f})" if m["saturated"] else
                    f"no (rho {m['utilisation']:.2f})"])
    return out


def _ms(v) -> str:
    return "-" if v in (None, "") else f"{float(v) * 1e3:.1f}"


HEAD = ["row", "TTFT ms measured", "TTFT ms model", "ITL ms measured", "TPOT ms model",
        "out tok/s measured", "out tok/s model", "model saturated"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    with open(CSV, newline="") as f:
        rows = list(csv.DictReader(f))
    table = closed_rows([r for r in rows if r["mode"] == "concurrency" and r["itl_mean_s"]])
    table += open_rows([r for r in rows if r["mode"] == "rps"])
    if args.markdown:
        print("| " + " | ".join(HEAD) + " |\n|" + "---|" * len(HEAD))
        print("\n".join("| " + " | ".join(r) + " |" for r in table))
    else:
        print("\n".join("  ".join(f"{c:>18}" for c in r) for r in [HEAD] + table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
