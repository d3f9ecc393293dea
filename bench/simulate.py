"""Timing of the request-level simulation (`serve --rps R --simulate`, and the closed
loop of `serve --concurrency C --simulate --length-spread 0.2`).

    python bench/simulate.py

For llama3_1_8b and qwen3_30b_a3b on h100_sxm, ISL/OSL 1000/200 and 200/1000, at 0.8 of
the most the replica completes: the step-cost grid (one vectorised evaluation of the
forms) and the simulation of 10,000 requests after 1,000 of warm-up, best of 3, in
seconds; then the closed loop of 64 clients with lengths +-20% on the same grids (the
ratio: closed over open). Target: each whole simulation under 2 s (printed, not asserted).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPEAT = 3


def main() -> int:
    from infest.compiler.analyses.continuous import point_forms
    from infest.compiler.analyses.serve import Request, Serving
    from infest.compiler.analyses.serve_open import OpenLoad, rank_cap, serve_open
    from infest.compiler.analyses.simulate import Load, simulate, simulate_closed
    from infest.compiler.analyses.stepgrid import build_grid
    from infest.compiler.backend.cache import cached_runner
    print(f"{'model':>14} {'shape':>9} {'grid s':>8} {'10k requests s':>15} {'total s':>8} "
          f"{'closed 64 s':>12} {'ratio':>6}")
    for spec in ("llama3_1_8b", "qwen3_30b_a3b"):
        path = ROOT / "specs" / "models" / f"{spec}.arch"
        eng = Serving(*(cached_runner(path, "h100_sxm", phase=p) for p in ("decode", "prefill")))
        base = {i.name: float(i.value) for i in eng.decode.inputs({}, checked=False)}
        for isl, osl in ((1000, 200), (200, 1000)):
            r = Request(isl, osl, None)
            rate = 0.8 * serve_open(eng, r, OpenLoad(1e-6), {})["max_requests_per_s"]
            cap, _ = rank_cap(eng, r, OpenLoad(rate), 1.0, {})
            times = []
            for _ in range(REPEAT):
                t0 = time.perf_counter()
                grid = build_grid(point_forms(eng.decode, base), eng.decode, 1.0, isl, osl,
                                  1.0, cap, r.chunk, eng.key)
                t1 = time.perf_counter()
                simulate(grid, Load(rate, cap, isl, osl, r.chunk), 10_000, 1_000, 0)
                t2 = time.perf_counter()
                closed = Load(0.0, 64, isl, osl, r.chunk, spread=0.2)
                simulate_closed(grid, closed, 64, 10_000, 1_000)
                times.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
            g, s, c = min(times, key=sum)
            print(f"{spec:>14} {isl:>4}/{osl:<4} {g:8.3f} {s:15.3f} {g + s:8.3f} "
                  f"{c:12.3f} {c / s:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
