"""The plan's Pareto front: tokens/s per GPU against tokens/s per user, best marked."""
from __future__ import annotations

from typing import Any, Mapping


def plot_pareto(result: Mapping[str, Any], path: str) -> None:
    """Every candidate, the front as a line, the chosen point as a star."""
    from matplotlib.figure import Figure

    from infest.exports.plots.plots import text_as_written
    text_as_written()
    fig = Figure(figsize=(7, 5), layout="constrained")
    ax = fig.subplots()
    xs = lambda cs: [c["tokens_per_s_per_user"] for c in cs]  # noqa: E731
    ys = lambda cs: [c["tokens_per_s_per_gpu"] for c in cs]  # noqa: E731
    ax.scatter(xs(result["candidates"]), ys(result["candidates"]), s=8, c="0.7", label="candidates")
    ax.plot(xs(result["pareto"]), ys(result["pareto"]), "o-", label="Pareto front")
    best = result["best"]
    ax.plot(xs([best]), ys([best]), "r*", markersize=16,
            label=f"best: tp={best['tp']} ep={best['ep']} pp={best['pp']} dp={best['dp']}, "
                  f"{best['gpus']} GPUs")
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("tokens/s per GPU")
    ax.legend()
    from infest.exports.plots.plots import save_figure
    save_figure(fig, path)
