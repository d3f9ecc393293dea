"""Figures of a model on hardware (matplotlib, rendered by Agg, imported only when drawing).

Panels, each usable alone (`--plot-kind`) or together in one figure (`all`):
  roofline    every op by arithmetic intensity vs the FLOP/s its time bound allows,
              under the compute roof(s) and the bandwidth roof (log-log)
  time        step time and tokens/s against context, one line per batch size
  memory      weights / KV cache / free memory stacked against batch, capacity marked
  throughput  tokens/s per sequence against aggregate tokens/s, one curve per context
  bound       which ceiling binds over the whole B x N grid, out-of-memory hatched
Every number comes from one vectorised evaluation of the closed forms per panel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from infest.dsl.errors import fail
from infest.exports.output import analysis_inputs

if TYPE_CHECKING:
    from infest.compiler.api import Analysis

PLOT_KINDS = ("all", "roofline", "time", "memory", "throughput", "bound")
FORMATS = (".png", ".svg", ".pdf")
BOUND_COLORS = {"compute": "#d62728", "weights": "#1f77b4", "kv": "#ff7f0e",
                "launch": "#7f7f7f", "comm": "#2ca02c", "host": "#9467bd"}
LABELS, LABEL_SHARE = 5, 0.05  # roofline: name at most 5 ops, each >= 5% of the step


def check_plot_path(path: str | Path) -> None:
    """Fail early (before any work) on a file type we cannot write."""
    if Path(path).suffix.lower() not in FORMATS:
        raise fail(None, f"--plot {path}: unsupported file type",
                   f"use one of {', '.join(FORMATS)}")


@dataclass
class _Ctx:
    """What every panel needs: the analysis, fixed inputs, the grid and a reference N."""

    analysis: "Analysis"
    overrides: Mapping[str, Any]
    Bs: list[int]
    Ns: list[int]
    n_ref: int = 0
    cache: dict = field(default_factory=dict)

    def grid(self, Bs: list[int], Ns: list[int]) -> dict[str, Any]:
        """Every flat form on Bs x Ns (one vectorised call)."""
        from infest.compiler.analyses.sweep import grid_values
        return grid_values(self.analysis, self.overrides, list(Bs), list(Ns))[1]

    @property
    def prefill(self) -> bool:
        """Whether N is a prompt length (prefill) rather than a cached context."""
        return self.analysis.forms.phase == "prefill"

    @property
    def n_label(self) -> str:
        """What N means in this phase, with its unit."""
        return ("prompt length N (tokens per sequence)" if self.prefill
                else "context N (tokens in cache per sequence)")

    @property
    def tokens(self) -> str:
        """What tokens/s counts in this phase."""
        return "prompt tokens/s" if self.prefill else "tokens/s"

    @property
    def name(self) -> str:
        """`Llama 3.1 8B Instruct on NVIDIA H100 SXM`, for titles."""
        hw = self.analysis.hardware
        return f"{self.analysis.forms.model.title} on {hw.title if hw else '?'}"


def write_plot(analysis: "Analysis", overrides: Mapping[str, Any], Bs: list[int],
               Ns: list[int], path: Path, kind: str = "all") -> Path:
    """Draw `kind` for this sweep and save it (format from the suffix)."""
    check_plot_path(path)
    return save_figure(build_figure(analysis, overrides, Bs, Ns, kind), path,
                       analysis_inputs(analysis))


def save_figure(fig: Any, path: Path | str, inputs: Sequence[str] = ()) -> Path:
    """Write a figure through the one write helper (format from the suffix)."""
    from infest.exports.output import write_output
    fmt = Path(path).suffix.lower().lstrip(".")
    return write_output(path, lambda handle: fig.savefig(handle, format=fmt, dpi=110),
                        inputs, "--plot")


def build_figure(analysis: "Analysis", overrides: Mapping[str, Any], Bs: list[int],
                 Ns: list[int], kind: str = "all"):
    """The matplotlib Figure of `kind` for this sweep (tests read what it shows)."""
    if kind not in PLOT_KINDS:
        raise fail(None, f"unknown plot kind {kind!r}", f"one of {', '.join(PLOT_KINDS)}")
    from infest.compiler.analyses.sweep import within_trained_context
    contexts = within_trained_context(analysis, overrides, _default_contexts())
    ctx = _Ctx(analysis, dict(overrides), _axis_or(Bs, _default_batches()),
               _axis_or(Ns, contexts))
    ctx.n_ref = ctx.Ns[len(ctx.Ns) // 2]
    panels = _PANELS if kind == "all" else [p for p in _PANELS if p[0] == kind]
    fig, axes = _figure(len(panels))
    for ax, (_, draw) in zip(axes, panels):
        draw(ax, ctx)
    fig.suptitle(f"{ctx.name}, {analysis.forms.phase}", fontsize=14, fontweight="bold")
    return fig


def text_as_written() -> None:
    """Titles and labels are drawn as written: no mathtext (`$\\foo{$` in a spec's title
    would be parsed as TeX and fail), no external TeX."""
    import matplotlib
    matplotlib.rcParams["text.parse_math"] = False
    matplotlib.rcParams["text.usetex"] = False


def _figure(n: int):
    """n panels in rows of up to three, constrained layout.

    A bare Figure, not pyplot: no global figure registry and no backend switch in the
    caller's session; savefig renders PNG through Agg (SVG/PDF through their own).
    """
    from matplotlib.figure import Figure
    text_as_written()
    cols = min(n, 3)
    rows = -(-n // cols)
    fig = Figure(figsize=(6.2 * cols, 5.0 * rows + 0.6), layout="constrained")
    flat = list(fig.subplots(rows, cols, squeeze=False).ravel())
    for ax in flat[n:]:
        ax.remove()
    return fig, flat[:n]


def _axis_or(values: list[int], fallback: list[int]) -> list[int]:
    """A line needs two points: fall back to a default range for a one-value axis."""
    return list(values) if len(values) >= 2 else fallback


def _default_batches() -> list[int]:
    return [2**k for k in range(0, 11)]


def _default_contexts() -> list[int]:
    return [2**k for k in range(7, 18)]


def _pick(values: list[int], k: int) -> list[int]:
    """Up to k values spread over the list (its ends included)."""
    import numpy as np
    idx = np.unique(np.linspace(0, len(values) - 1, min(k, len(values))).round().astype(int))
    return [values[i] for i in idx]


def _log_if_wide(ax, axis: str, values: Any, ratio: float = 30.0) -> None:
    """Log scale where positive data spans more than `ratio` (decades read better)."""
    import numpy as np
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size and v.max() / v.min() > ratio:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")


def _shades(n: int) -> list:
    """n colours along one ordered colour map: many lines stay distinguishable and
    their order (batch or context) reads from the colour."""
    from matplotlib import colormaps
    cmap = colormaps["viridis"]
    return [cmap(0.9 * i / max(n - 1, 1)) for i in range(n)]


def _ms(seconds: Any) -> Any:
    return seconds * 1e3


# ---- (a) roofline ------------------------------------------------------------------

def roofline(ax, ctx: _Ctx) -> None:
    """Ops by FLOP/byte vs FLOP/s allowed by their time bound, under the roofs."""
    batches = sorted({ctx.Bs[0], ctx.Bs[-1]})
    values = ctx.grid(batches, [ctx.n_ref])
    intensities = _draw_op_points(ax, ctx, values, batches)
    _draw_roofs(ax, ctx, *_roof_range(intensities, ctx))
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="attainable TFLOP/s (FLOPs / time bound)",
           title=f"Roofline per op at N={ctx.n_ref} (area: share of step time)\n"
                 f"under the roof: held up by the launch floor "
                 f"({_hw(ctx, 'launch_overhead') * 1e6:.3g} us per kernel)")
    legend = ax.legend(fontsize=8, loc="lower right")
    for handle in legend.legend_handles:
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([40])  # legend markers at one size, not the first op's
    ax.grid(True, which="major", alpha=0.3)


def _draw_roofs(ax, ctx: _Ctx, lo: float, hi: float) -> None:
    """min(peak, bandwidth * intensity) for each math peak the ops use; ridges dotted."""
    import numpy as np
    xs = np.geomspace(lo, hi, 200)
    bw = _hw(ctx, "mem_bw")
    styles = ("-", "--", "-.", ":")
    for k, peak in enumerate(_running_peaks(ctx)):
        p = _hw(ctx, f"flops_{peak}")
        if p:
            ax.plot(xs, np.minimum(p, bw * xs) / 1e12, lw=2, color="C0", ls=styles[k % 4],
                    label=f"roof: {peak} {p / 1e12:.4g} TFLOP/s, {bw / 1e12:.3g} TB/s")
            ax.axvline(p / bw, color="0.7", ls=":", lw=1)


def _running_peaks(ctx: _Ctx) -> list[str]:
    """The peaks the ops' math runs at on this hardware (after any fallback)."""
    from infest.compiler.backend.report import running_peak
    values = {i.name: i.value for i in ctx.analysis.inputs(ctx.overrides)}
    return sorted({running_peak(op.peaks, values) for op in ctx.analysis.runner.ops if op.peaks})


def _hw(ctx: _Ctx, name: str) -> float:
    """A hardware value (after --set overrides), 0 if the hardware lacks it."""
    for i in ctx.analysis.inputs(ctx.overrides):
        if i.name == name:
            return float(i.value)
    return 0.0


def _draw_op_points(ax, ctx: _Ctx, values: Mapping[str, Any], batches: list[int]) -> list[float]:
    """One marker per op per batch, area by its share of the step; names on the first batch."""
    import numpy as np
    seen: list[float] = []
    for j, (b, marker) in enumerate(zip(batches, ("o", "s"))):
        points = _op_points(ctx, values, j, len(batches))
        fits = bool(np.ravel(np.broadcast_to(values["memory.fits"], (len(batches), 1)))[j])
        xs, ys, shares = (list(col) for col in zip(*[p[1:] for p in points])) if points else ([], [], [])
        ax.scatter(xs, ys, s=[12 + 400 * s for s in shares], marker=marker, alpha=0.55,
                   color=f"C{j + 2}", edgecolor="k", lw=0.5, zorder=3,
                   label=f"ops at B={b}" + ("" if fits else " (does not fit)"))
        seen += xs
        if j == 0:
            _label_points(ax, points)
    return seen


def _op_points(ctx: _Ctx, values: Mapping[str, Any], j: int, n: int) -> list[tuple]:
    """(name, FLOP/byte, TFLOP/s, share of step time) for each op with FLOPs, batch j."""
    import numpy as np
    col = lambda key: float(np.ravel(np.broadcast_to(values[key], (n, 1)))[j])  # noqa: E731
    total, out = col("step.time_s"), []
    for i, op in enumerate(ctx.analysis.forms.model.ops):
        flops, nbytes, t = (col(f"ops.{i}.{k}") for k in ("flops", "bytes", "time_s"))
        if flops > 0 and nbytes > 0:  # a pure gather has no place on a FLOP/s axis
            out.append((op.name, flops / nbytes, flops / t / 1e12,
                        col(f"ops.{i}.count") * t / total))
    return out


def _label_points(ax, points: list[tuple]) -> None:
    """Name the few ops that carry the step (the largest shares of its time, at least
    LABEL_SHARE each); ops that land on the same spot share one label. The rest are
    markers whose size already says they matter little."""
    import math
    spots: dict[tuple[float, float], list[str]] = {}
    big = sorted(points, key=lambda p: -p[3])[:LABELS]
    for name, x, y, _ in [p for p in big if p[3] >= LABEL_SHARE]:
        spots.setdefault((round(math.log10(x), 1), round(math.log10(y), 1)), []).append(name)
    placed = {key: (x, y) for name, x, y, _ in big
              for key in [(round(math.log10(x), 1), round(math.log10(y), 1))]}
    for key, names in spots.items():
        text = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
        ax.annotate(text, placed[key], fontsize=7, xytext=(5, -3), textcoords="offset points")


def _roof_range(intensities: list[float], ctx: _Ctx) -> tuple[float, float]:
    ridges = [_hw(ctx, f"flops_{peak}") / _hw(ctx, "mem_bw") for peak in _running_peaks(ctx)]
    points = [v for v in intensities + ridges if v > 0]
    return min(points) / 4, max(points) * 8


# ---- (b) time and tokens/s against context ------------------------------------------

def time_vs_context(ax, ctx: _Ctx) -> None:
    """Step time with the launch floor against N, one line per batch size; OOM dotted."""
    _per_batch_lines(ax, ctx, "step.time_s", _ms, "step time with launch floor (ms)",
                     "Step time vs N")


def tokens_vs_context(ax, ctx: _Ctx) -> None:
    """Aggregate tokens/s upper bound against N, one line per batch size; OOM dotted."""
    _per_batch_lines(ax, ctx, "step.tokens_per_s", lambda v: v,
                     f"{ctx.tokens} upper bound (all sequences)", "Throughput vs N")


def _per_batch_lines(ax, ctx: _Ctx, key: str, scale, ylabel: str, title: str) -> None:
    """A line per batch size asked for, coloured small (light) to large (dark)."""
    import numpy as np
    values = ctx.grid(ctx.Bs, ctx.Ns)
    shape = (len(ctx.Bs), len(ctx.Ns))
    y = scale(np.broadcast_to(values[key], shape))
    fits = np.broadcast_to(values["memory.fits"], shape)
    colors = _shades(len(ctx.Bs))
    for i, b in enumerate(ctx.Bs):
        _fit_split_line(ax, ctx.Ns, y[i], fits[i], colors[i], f"B={b}")
    _log_if_wide(ax, "x", ctx.Ns)
    _log_if_wide(ax, "y", y)
    ax.set(xlabel=ctx.n_label, ylabel=ylabel,
           title=f"{title} (dotted: does not fit in memory)")
    ax.legend(fontsize=7, ncol=2 if len(ctx.Bs) <= 12 else 3)
    ax.grid(True, which="both", alpha=0.25)


def _fit_split_line(ax, xs, ys, fits, color, label: str) -> None:
    """Solid where the point fits in memory, dotted past it (joined at the boundary)."""
    import numpy as np
    oom = ~np.asarray(fits, dtype=bool)
    reach = oom | np.append(oom[1:], False)  # the last fitting point starts the dotted part
    ax.plot(xs, np.where(oom, np.nan, ys), color=color, lw=1.8, label=label)
    ax.plot(xs, np.where(reach, ys, np.nan), color=color, lw=1.3, ls=":")


# ---- (c) memory against batch -------------------------------------------------------

def memory_vs_batch(ax, ctx: _Ctx) -> None:
    """Weights, KV cache and free memory stacked against B at the reference N."""
    import numpy as np
    point = ctx.grid([1], [ctx.n_ref])
    max_batch = float(np.ravel(point["memory.max_batch"])[0])
    bounded = bool(np.isfinite(max_batch))  # no KV cache: any batch fits (infinite)
    # the capacity edge with room past it; without one, the batches swept
    top = max(8, int(max_batch * 1.6) + 2) if bounded else max(8, *ctx.Bs)
    Bs = sorted(set(np.linspace(1, top, 400).round().astype(int).tolist()))
    v = ctx.grid(Bs, [ctx.n_ref])
    gb = lambda key: np.broadcast_to(v[key], (len(Bs), 1))[:, 0] / 1e9  # noqa: E731
    weights, kv, cap = gb("memory.weights_bytes"), gb("memory.kv_bytes"), gb("memory.capacity_bytes")
    free = np.maximum(cap - weights - kv, 0)
    ax.stackplot(Bs, weights, kv, free, labels=["weights", "KV cache", "free"],
                 colors=[BOUND_COLORS["weights"], BOUND_COLORS["kv"], "#d9ead3"], alpha=0.85)
    ax.axhline(cap[0], color="k", lw=1.5, label=f"capacity {cap[0]:.4g} GB")
    if bounded and max_batch >= 1:
        ax.axvline(max_batch, color="k", ls="--", lw=1.2, label=f"max batch = {int(max_batch)}")
    ax.set(xlabel="batch B (sequences)", ylabel="memory (GB, 10^9 bytes)", xlim=(1, top),
           ylim=(0, max(cap[0], weights[0]) * 1.45),
           title=f"Memory vs batch at N={ctx.n_ref}")
    ax.legend(fontsize=8, loc="upper left")


# ---- (d) per-sequence against aggregate tokens/s -------------------------------------

def throughput_tradeoff(ax, ctx: _Ctx) -> None:
    """Each curve: one context; points: batch sizes; hollow: does not fit."""
    import numpy as np
    contexts = ctx.Ns
    v = ctx.grid(ctx.Bs, contexts)
    shape = (len(ctx.Bs), len(contexts))
    total = np.broadcast_to(v["step.tokens_per_s"], shape)
    fits = np.broadcast_to(v["memory.fits"], shape)
    per_seq = total / np.asarray(ctx.Bs, dtype=float)[:, None]
    placed: list[tuple[float, float]] = []
    colors = _shades(len(contexts))
    for j, n in enumerate(contexts):
        _tradeoff_curve(ax, ctx.Bs, total[:, j], per_seq[:, j], fits[:, j], colors[j], n, placed)
    _log_if_wide(ax, "x", total)
    _log_if_wide(ax, "y", per_seq)
    ax.set(xlabel=f"aggregate {ctx.tokens} (all sequences)", ylabel=f"{ctx.tokens} per sequence",
           title="Per-sequence vs aggregate throughput (labels: B; hollow: OOM)")
    ax.legend(fontsize=7, ncol=1 if len(contexts) <= 8 else 2)
    ax.grid(True, which="both", alpha=0.25)


def _tradeoff_curve(ax, Bs, total, per_seq, fits, color, n: int,
                    placed: list[tuple[float, float]]) -> None:
    """One context's curve; a few points labelled with B where no label sits already."""
    import math
    ax.plot(total, per_seq, color=color, lw=1.2, label=f"N={n}")
    ax.scatter(total[fits], per_seq[fits], color=color, s=18, zorder=3)
    ax.scatter(total[~fits], per_seq[~fits], facecolor="none", edgecolor=color, s=18, zorder=3)
    for i in _pick(list(range(len(Bs))), 4):
        if not (total[i] > 0 and per_seq[i] > 0):
            continue
        spot = (math.log10(total[i]), math.log10(per_seq[i]))
        if any(abs(spot[0] - x) < 0.12 and abs(spot[1] - y) < 0.05 for x, y in placed):
            continue  # curves meet at small B: one label there is enough
        placed.append(spot)
        ax.annotate(f"B={Bs[i]}", (total[i], per_seq[i]), fontsize=7, color=color,
                    xytext=(4, -2), textcoords="offset points")


# ---- bound map ----------------------------------------------------------------------

def bound_map(ax, ctx: _Ctx) -> None:
    """The binding ceiling at every (B, N) of the grid; out-of-memory cells hatched."""
    from matplotlib.colors import ListedColormap
    from infest.compiler.core.terms import BOUND_TERMS
    cmap = ListedColormap([BOUND_COLORS[k] for k in BOUND_TERMS])
    xe, ye = _edges(ctx.Ns), _edges(ctx.Bs)
    # rasterized: a 1000 x 1000 grid stays a small image inside an SVG
    ax.pcolormesh(xe, ye, _bound_codes(ctx), cmap=cmap, vmin=-0.5,
                  vmax=len(BOUND_TERMS) - 0.5, rasterized=True)
    _memory_limit(ax, ctx, xe, ye)
    _log_if_wide(ax, "x", ctx.Ns)
    _log_if_wide(ax, "y", ctx.Bs)
    ax.legend(handles=_bound_handles(), fontsize=8, loc="upper right", framealpha=0.9)
    ax.set(xlabel=ctx.n_label, ylabel="batch B (sequences)",
           title="Binding ceiling over the grid")


def _bound_codes(ctx: _Ctx) -> Any:
    """The index in BOUND_TERMS of the binding ceiling, per cell (one grid evaluation)."""
    import numpy as np
    from infest.compiler.backend.report import step_bound
    from infest.compiler.core.terms import BOUND_TERMS
    shape = (len(ctx.Bs), len(ctx.Ns))
    names = np.broadcast_to(step_bound(ctx.grid(ctx.Bs, ctx.Ns)), shape)
    codes = np.zeros(shape, dtype=int)
    for k, term in enumerate(BOUND_TERMS):
        codes[names == term] = k
    return codes


def _bound_handles() -> list:
    from matplotlib.patches import Patch
    from infest.compiler.core.terms import BOUND_TERMS
    handles = [Patch(color=BOUND_COLORS[k], label=k) for k in BOUND_TERMS]
    return handles + [Patch(facecolor="none", edgecolor="k", hatch="///", label="does not fit")]


def _memory_limit(ax, ctx: _Ctx, xe: Any, ye: Any) -> None:
    """max_batch(N) as a line, everything above it hatched: the cells that do not fit."""
    import numpy as np
    from infest.compiler.analyses.sweep import within_trained_context
    ns = sorted(set(np.maximum(1, np.geomspace(xe[0], xe[-1], 256).round()).astype(int).tolist()))
    ns = within_trained_context(ctx.analysis, ctx.overrides, ns)  # the edge may pass it
    v = ctx.grid([1], ns)
    limit = np.broadcast_to(v["memory.max_batch"], (1, len(ns)))[0]
    limit = np.clip(limit, ye[0], ye[-1])
    n_used = np.asarray(ns, dtype=float)
    ax.plot(n_used, limit, color="k", lw=1.5)
    ax.fill_between(n_used, limit, ye[-1], facecolor="none", edgecolor="k", hatch="///", lw=0)
    ax.set(xlim=(xe[0], xe[-1]), ylim=(ye[0], ye[-1]))


def _edges(values: list[int]) -> Any:
    """Cell edges around sorted centres: geometric midpoints (fine on log or linear axes)."""
    import numpy as np
    c = np.asarray(values, dtype=float)
    mids = np.sqrt(c[:-1] * c[1:])
    first = c[0] ** 2 / mids[0]
    last = c[-1] ** 2 / mids[-1]
    return np.concatenate([[first], mids, [last]])


_PANELS = [("roofline", roofline), ("time", time_vs_context), ("time", tokens_vs_context),
           ("memory", memory_vs_batch), ("throughput", throughput_tradeoff),
           ("bound", bound_map)]


def write_depth_plot(report: dict, path: Path, inputs: Sequence[str] = ()) -> Path:
    """`diagnose --depth --plot`: measured tokens/s against the bound's curve in N."""
    check_plot_path(path)
    points = report["depth"]["points"]
    Ns = [p["N"] for p in points]
    fig, (ax,) = _figure(1)
    ax.plot(Ns, [p["bound_tokens_per_s"] for p in points], "o-", color=BOUND_COLORS["weights"],
            label="bound (infest)")
    ax.plot(Ns, [p["measured_tokens_per_s"] for p in points], "s--", color="#d62728",
            label="measured")
    if report["depth"]["diverges_at"] is not None:
        ax.axvline(report["depth"]["diverges_at"], color="#7f7f7f", ls=":",
                   label="measured falls away")
    _log_if_wide(ax, "x", Ns)
    ax.set_xlabel("context N (tokens in cache per sequence)")
    ax.set_ylabel("tokens/s")
    ax.set_title(f"{report['model']} on {report['hardware']}: depth")
    ax.legend()
    return save_figure(fig, path, inputs)
