"""One regularised fit of the estimate's parameters across GPUs and engines.

Each parameter p of a row on GPU g under engine e of family f is

    p = exp(shared_p + gpu_p[g] + engine_p[f] + engine_p[e])    (an efficiency capped at 1)

where `shared` holds the physics every row shares and the offsets hold what a GPU
(eff_mem, eff_flops: its kernels against its datasheet) or an engine (eff_mem, eff_flops,
eff_attn, eff_kv: its own kernels; kernel_latency, step_overhead, request_overhead; the
per-SM ceiling sm_bytes_per_cycle where its rows can tell it from eff_mem; its
collectives' latency per ring step coll_step_latency, where its rows span GPUs: an
engine's own one-shot all-reduce inside a node takes far less than NCCL's ring, its calls
between nodes more; `_used`) adds.
An engine profile that is a build or an era of another (its "family": vllm-rocm of vllm,
sglang-0.4 of sglang) adds its own offset to its family's (engine_p[f], the same table;
none when e is its own family), so a build measured on one GPU only is predicted
elsewhere from what its family pays. A
parameter no two engines share (ENGINE_ONLY: the per-request overhead) keeps its shared
value at the prior's centre and lives in the engines' offsets alone. The fit minimises, with
`scipy.optimize.least_squares` inside bounds,

    sum over rows ((ln estimate - ln measured) / NOISE_SD)^2
      + sum over parameters (deviation / sd)^2

with each shared parameter pulled toward its documented default (PRIOR) and each offset
toward 0 (GPU_SD, ENGINE_SD): a GPU or engine with few rows stays near the shared
values, and one never seen (held out) gets exactly them, i.e. its datasheet and the
shared physics (an engine never seen: its family's offsets, where the family was). A fit
whose shared parameter ends at a bound, or whose efficiency exceeds 1 before the cap,
leaves its physical range and is reported so (`violations`). The cap is also a term of
the fit: an efficiency above 1 for a (GPU, engine) pair the rows hold adds (ln value /
CAP_SD)^2, so shared values and offsets settle inside the range rather than on the far
side of a cap the data cannot feel (a capped efficiency no longer moves its rows).
Held-out errors (leave-one-out, leave-one-GPU-out, leave-one-engine-out) refit without
the held rows, at most MAX_REFITS times. Each row's estimate is a few numpy operations
(compiler/analyses/calibrate.py, compiler/analyses/served_rows.py) that take arrays of
parameters, so the Jacobian's forward differences (one per coordinate) are one
vectorised evaluation per row: a fit of 76 rows takes about a second.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from infest.compiler.load.fields import SHARES as RATIOS

if TYPE_CHECKING:
    from infest.compiler.analyses.calibrate import Prepared

# (default centre, sd of ln(value)); the centres are the documented defaults
# (compiler/load/fields.py; coll_step_latency: NCCL's measured 0.86 us a ring step, sd
# 0.5 as the efficiencies'), except the two overheads
# whose default is 0 (off): their centres are assumptions, "tens of us to
# milliseconds" per step and 10 ms per request, with a wide sd (a factor e^2 ~ 7.4).
PRIOR = {"eff_mem": (0.8, 0.5), "eff_flops": (0.7, 0.5), "eff_attn": (0.48, 0.5),
         "eff_kv": (0.87, 0.5), "eff_link": (0.8, 0.5), "kernel_latency": (4.3e-6, 1.0),
         "step_overhead": (1e-4, 2.0), "request_overhead": (1e-2, 2.0),
         "sm_bytes_per_cycle": (32.0, 2.0), "coll_step_latency": (8.6e-7, 0.5)}
BOUNDS = {"eff_mem": (0.05, 1.0), "eff_flops": (0.05, 1.0), "eff_attn": (0.05, 1.0),
          "eff_kv": (0.05, 1.0), "eff_link": (0.05, 1.0), "kernel_latency": (1e-8, 1e-3),
          "step_overhead": (1e-7, 1.0), "request_overhead": (1e-7, 10.0),
          "sm_bytes_per_cycle": (0.5, 1e3), "coll_step_latency": (1e-9, 1e-4)}
SHARES = tuple(k for k in PRIOR if k in RATIOS)     # capped at 1
PER_GPU = ("eff_mem", "eff_flops")
PER_ENGINE = ("eff_mem", "eff_flops", "eff_attn", "eff_kv", "kernel_latency", "step_overhead",
              "request_overhead", "sm_bytes_per_cycle", "coll_step_latency")
# Parameters no two engines share: their shared value stays at the prior's centre (not
# fitted) and each engine's offset carries all of its value, so one engine's per-request
# costs (SGLang's ~0.3 s TTFT on DeepSeek) never move another's.
ENGINE_ONLY = ("request_overhead", "sm_bytes_per_cycle")
# Parameters whose default sits on a Min's flat side (compiler/core/estimate_rule.py
# sm_share) and the ln below its binding edge an engine's offset starts at (_binding).
CEILINGS = ("sm_bytes_per_cycle",)
# A fit from the defaults starts an engine's ceiling this far (ln) below its binding
# edge, so it binds on each of the engine's GPUs where it could (llama.cpp: ends at 6.8
# bytes per SM-cycle from 0.5, 1, 1.5 or 2 below, costs within 0.02). Held-out refits
# start from the full fit.
CEILING_START = 1.0
# How far a GPU's or an engine's value may stray from the shared one (sd of ln): a GPU's
# kernels reach their datasheet within ~30%, an engine's weight reads and GEMMs too (0.3:
# DeepGEMM, cuBLAS, hipBLASLt, llama.cpp's quantized GEMMs); its attention kernels,
# prefill (eff_attn) and decode (eff_kv), differ more (0.5: each engine ships its own,
# FlashInfer, TensorRT-LLM's FMHA, AITER on ROCm, llama.cpp's; paged attention on ROCm
# against FlashAttention-class kernels); its fixed costs are its own (a step costs tens
# of us to milliseconds by engine), sd 2.
GPU_SD = {"eff_mem": 0.3, "eff_flops": 0.3}
# The least spread of SM cycles per HBM byte across an engine's GPUs that lets its rows
# fit a per-SM ceiling: what two GPUs' eff_mem offsets span at one sd each, e^(2 x 0.3)
# = 1.82 (the A100 to the RTX 4090: 4.3x; the H100 SXM to the H200: 1.43x).
CEILING_SPAN = math.exp(2 * GPU_SD["eff_mem"])
ENGINE_SD = {"eff_mem": 0.3, "eff_flops": 0.3, "eff_attn": 0.5, "eff_kv": 0.5,
             "kernel_latency": 2.0, "step_overhead": 2.0, "request_overhead": 2.0,
             "sm_bytes_per_cycle": 2.0, "coll_step_latency": 1.0}
# The spread of a measurement's ln(time) about the model (sd): public figures converted to
# step times (rounding, averaging over contexts, batch assumptions) carry ~10%. Data
# residuals are divided by it, so the priors weigh as a Gaussian prior against this noise.
NOISE_SD = 0.1
# The cap as a penalty (sd of ln above 1): 1% above it costs as a row 10% off, so a fit
# settles within CAP_TOL of it (3e-4 on the 76 rows); a stiffer one (1e-3) converged to a
# worse fit in twice the time.
CAP_SD = 1e-2
CAP_TOL = 1e-3                 # ln above 1 that `violations` reports (the penalty's slack)
MAX_REFITS = 200               # held-out refits one call may run (each a least-squares fit)
MAX_EVALUATIONS = 300          # residual evaluations one fit may spend (scipy max_nfev)
STEP = 1e-7                    # forward-difference step of the Jacobian, in ln(parameter)
TOL = 1e-10                    # least_squares ftol, xtol, gtol (1e-6 halves the time but
                               # moves a held-out error by up to 0.7%)


@dataclass
class Fit:
    """Fitted shared values and offsets; `values` gives a row's parameters."""

    shared: dict[str, float]
    gpu: dict[str, dict[str, float]]
    engine: dict[str, dict[str, float]]
    cost: float

    def values(self, gpu: str, engine: str) -> dict[str, float]:
        """Parameters of a (GPU, engine) pair: unseen ones add no offset."""
        out = {}
        for name in self.shared:
            log = self.log_value(gpu, engine, name)
            out[name] = min(1.0, math.exp(log)) if name in SHARES else math.exp(log)
        return out

    def log_value(self, gpu: str, engine: str, name: str) -> float:
        """ln of a parameter before the cap: shared + GPU + family + engine offsets."""
        return math.log(self.shared[name]) + self.gpu.get(gpu, {}).get(name, 0.0) \
            + sum(self.engine.get(e, {}).get(name, 0.0) for e in engine_groups(engine))


def _layout(rows: list["Prepared"]) -> tuple[list[tuple[str, str | None, str]], list[str], list[str]]:
    """Every free coordinate: (param, None, 'shared') or (param, group, 'gpu'/'engine')."""
    gpus = sorted({p.row.hardware for p in rows})
    engines = sorted({e for p in rows for e in engine_groups(engine_of(p))})
    coords = [(k, None, "shared") for k in PRIOR if k not in ENGINE_ONLY]
    coords += [(k, g, "gpu") for g in gpus for k in PER_GPU]
    coords += [(k, e, "engine") for e in engines for k in PER_ENGINE if _used(rows, e, k)]
    return coords, gpus, engines


def _used(rows: list["Prepared"], engine: str, name: str) -> bool:
    """request_overhead only moves TTFT rows: no offset for an engine (or a family)
    without one; coll_step_latency only rows on more than one GPU (tp, ep or pp). The
    per-SM ceiling is told apart from eff_mem only by one engine's rows
    on GPUs whose SM cycles per HBM byte (sms x clock / mem_bw) differ by more than
    CEILING_SPAN: otherwise the GPUs' own eff_mem offsets explain the same rows, and the
    ceiling would be a second eff_mem free of eff_mem's prior. No offset then."""
    from infest.compiler.analyses.calibrate import quantity
    own = [p for p in rows if engine in engine_groups(engine_of(p))]
    if name == "request_overhead":
        return any(quantity(p.row) == "ttft_s" for p in own)
    if name == "coll_step_latency":     # no collective on one GPU: nothing to tell
        return any(max(p.row.point.get(k, 1) for k in ("tp", "ep", "pp")) > 1 for p in own)
    if name in CEILINGS:
        ratios = [p.inputs["sms"] * p.inputs["clock"] / p.inputs["mem_bw"]
                  for p in _clocked(rows, engine)]
        return bool(ratios) and max(ratios) > CEILING_SPAN * min(ratios)
    return True


def _clocked(rows: list["Prepared"], engine: str) -> list["Prepared"]:
    """An engine's own rows on GPUs with a clock: where its per-SM ceiling can bind (a
    family's rows are other builds' kernels)."""
    return [p for p in rows if engine_of(p) == engine and p.inputs["clock"] > 0]


def engine_of(p: "Prepared") -> str:
    """A row's engine profile name (empty: eager)."""
    return p.row.engine or "eager"


def engine_groups(engine: str) -> tuple[str, ...]:
    """The offset groups an engine's parameters add: its family's, then its own (once when
    it is its own family)."""
    return tuple(dict.fromkeys((family(engine), engine)))


def family(engine: str) -> str:
    """The family an engine profile belongs to (its "family" in specs/engines/*.json);
    the built-in profiles (eager, graphs) and a profile naming none are their own."""
    return _families().get(engine, engine)


@functools.lru_cache(maxsize=1)
def _families() -> dict[str, str]:
    from infest.compiler.load.engine_profiles import load_profiles
    return {name: p.family for name, p in load_profiles().items()}


def _unpack(x: np.ndarray, coords) -> Fit:
    shared = {k: PRIOR[k][0] for k in ENGINE_ONLY}
    shared.update({k: math.exp(v) for (k, _, kind), v in zip(coords, x) if kind == "shared"})
    gpu: dict[str, dict[str, float]] = {}
    engine: dict[str, dict[str, float]] = {}
    for (k, group, kind), v in zip(coords, x):
        if kind != "shared":
            (gpu if kind == "gpu" else engine).setdefault(group, {})[k] = float(v)
    return Fit(shared, gpu, engine, 0.0)


def _residual_matrix(coords, rows: list["Prepared"]) -> Callable[[np.ndarray], np.ndarray]:
    """A function of X (K points x the coordinates) giving the residuals at each point
    (K x (rows + coordinates)): every row's estimate takes all K parameter sets at once.
    A parameter without a shared coordinate (ENGINE_ONLY) starts from the prior's centre."""
    pos = {c: i for i, c in enumerate(coords)}
    centre = np.array([math.log(PRIOR[k][0]) if kind == "shared" else 0.0 for k, _, kind in coords])
    sd = np.array([PRIOR[k][1] if kind == "shared" else (GPU_SD if kind == "gpu" else ENGINE_SD)[k]
                   for k, _, kind in coords])
    # Per row and parameter: the coordinates whose sum is ln(value) (shared, GPU, family
    # and engine).
    paths = [{k: [pos[c] for c in ((k, None, "shared"), (k, p.row.hardware, "gpu"),
                                   *((k, e, "engine") for e in engine_groups(engine_of(p))))
                  if c in pos] for k in PRIOR} for p in rows]
    base = {k: 0.0 if (k, None, "shared") in pos else math.log(PRIOR[k][0]) for k in PRIOR}
    # Per (GPU, engine) pair the rows hold, each efficiency's path: the cap's penalty.
    capped = list({(p.row.hardware, engine_of(p), k): (k, path[k])
                   for p, path in zip(rows, paths) for k in SHARES}.values())

    def matrix(X: np.ndarray) -> np.ndarray:
        data = []
        for p, path in zip(rows, paths):
            params = {}
            for k, idx in path.items():
                log = X[:, idx].sum(axis=1) + base[k]
                params[k] = np.minimum(1.0, np.exp(log)) if k in SHARES else np.exp(log)
            data.append(np.log(p.estimate(params) / p.row.step_s) / NOISE_SD)
        over = [np.maximum(0.0, X[:, idx].sum(axis=1) + base[k]) / CAP_SD for k, idx in capped]
        return np.column_stack(data + over + [(X - centre) / sd])
    return matrix


def fit_all(rows: list["Prepared"], start: Fit | None = None,
            below: float = CEILING_START) -> Fit:
    """The regularised least-squares fit over these rows (module docstring) from `start`
    (else the defaults, an engine's ceiling `below` its binding edge); the Jacobian by
    forward differences, every coordinate's step evaluated in one vectorised pass."""
    from scipy.optimize import least_squares
    coords, _, _ = _layout(rows)
    matrix = _residual_matrix(coords, rows)
    n = len(coords)

    def jacobian(x: np.ndarray) -> np.ndarray:
        r = matrix(np.vstack([x, x + STEP * np.eye(n)]))
        return ((r[1:] - r[0]) / STEP).T
    x0 = np.array([_start(start, c, rows, below) for c in coords])
    lo = np.array([math.log(BOUNDS[k][0]) if kind == "shared" else -np.inf for k, _, kind in coords])
    hi = np.array([math.log(BOUNDS[k][1]) if kind == "shared" else np.inf for k, _, kind in coords])
    result = least_squares(lambda x: matrix(x[None])[0], np.clip(x0, lo + 1e-9, hi - 1e-9),
                           jac=jacobian, bounds=(lo, hi), x_scale="jac", ftol=TOL, xtol=TOL,
                           gtol=TOL, max_nfev=MAX_EVALUATIONS)
    out = _unpack(result.x, coords)
    out.cost = float(result.cost)
    return out


def _start(start: Fit | None, coord, rows: list["Prepared"], below: float) -> float:
    k, group, kind = coord
    if kind == "shared":
        return math.log(start.shared[k] if start else PRIOR[k][0])
    if start is None and k in CEILINGS:
        return _binding(rows, group, below)
    table = (start.gpu if kind == "gpu" else start.engine) if start else {}
    return table.get(group, {}).get(k, 0.0)


def _binding(rows: list["Prepared"], engine: str, below: float) -> float:
    """Where an engine's per-SM ceiling starts: `below` (ln) under its binding edge on the
    GPU (with a clock) of its own rows where it binds first (`_used`). At the default it
    binds nowhere, so the fit could not feel it (a Min's flat side); started binding, rows
    that want it pull it lower and the prior returns it to the default where none does."""
    centre = PRIOR["sm_bytes_per_cycle"][0]
    logs = [math.log(PRIOR["eff_mem"][0] * p.inputs["mem_bw"]
                     / (p.inputs["sms"] * p.inputs["clock"] * centre))
            for p in _clocked(rows, engine)]
    return min(0.0, max(logs, default=0.0) - below)


def violations(f: Fit, pairs: set[tuple[str, str]]) -> list[str]:
    """Where a fit leaves the physical range: a shared value at its bound, or an
    efficiency above 1 before the cap for a (GPU, engine) pair the rows hold."""
    out = [f"{k} = {v:.4g} at its bound" for k, v in f.shared.items()
           if min(abs(math.log(v / b)) for b in BOUNDS[k]) < 1e-6]
    for (g, e), k in ((pair, k) for pair in sorted(pairs) for k in SHARES):
        log = f.log_value(g, e, k)
        if log > CAP_TOL:
            out.append(f"{k} on {g} under {e} = {math.exp(log):.3g} > 1")
    return out


def held_out(rows: list["Prepared"], key: Callable[["Prepared"], str], start: Fit) -> list[float]:
    """Each row's relative error under a fit to the rows whose key differs from its own
    (key = the row itself: leave-one-out; its GPU; its engine)."""
    groups = sorted({key(p) for p in rows})
    if len(groups) > MAX_REFITS:
        raise ValueError(f"{len(groups)} held-out fits exceed MAX_REFITS = {MAX_REFITS}")
    errors: dict[int, float] = {}
    for g in groups:
        train = [p for p in rows if key(p) != g]
        if not train:
            continue
        f = fit_all(train, start)
        for i, p in enumerate(rows):
            if key(p) == g:
                errors[i] = float(p.estimate(f.values(p.row.hardware, engine_of(p)))) / p.row.step_s - 1
    return [errors.get(i, math.nan) for i in range(len(rows))]


def pairs_of(rows: list["Prepared"]) -> set[tuple[str, str]]:
    """The (GPU, engine) pairs the rows hold."""
    return {(p.row.hardware, engine_of(p)) for p in rows}


def row_errors(rows: list["Prepared"], f: Fit) -> list[float]:
    """Relative error of each row under a fit."""
    return [float(p.estimate(f.values(p.row.hardware, engine_of(p)))) / p.row.step_s - 1
            for p in rows]


HOLD_OUT: Mapping[str, Callable[["Prepared"], str]] = {
    "leave-one-out": lambda p: f"{p.row.span.file}:{p.row.span.line}",
    "leave-one-GPU-out": lambda p: p.row.hardware,
    "leave-one-engine-out": engine_of,
}
