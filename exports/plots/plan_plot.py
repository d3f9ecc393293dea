"""The plan's Pareto front: tokens/s per GPU against tokens/s per user, best marked."""
from __future__ import annotations

from typing import Any, Mapping

from infest.exports.text.serve_text import plan_title


def plot_pareto(result: Mapping[str, Any], path: str) -> None:
    """The listed (feasible) candidates, their front as a line, the best as a star (on the
    front, or named with the front point that dominates it); titled with the request."""
    from matplotlib.figure import Figure

    from infest.exports.plots.plots import save_figure, text_as_written
    text_as_written()
    fig = Figure(figsize=(8, 5.5), layout="constrained")
    ax = fig.subplots()
    xs = lambda cs: [c["tokens_per_s_per_user"] for c in cs]  # noqa: E731
    ys = lambda cs: [c["tokens_per_s_per_gpu"] for c in cs]  # noqa: E731
    ax.scatter(xs(result["candidates"]), ys(result["candidates"]), s=8, c="0.7",
               label="candidates meeting the limits")
    ax.plot(xs(result["pareto"]), ys(result["pareto"]), "o-", label="Pareto front")
    best, over = result["best"], result.get("best_dominated_by")
    label = f"best: {_layout(best)}, {best['gpus']} GPUs"
    if over is not None:
        label += f" (dominated by {_layout(over)}, {over['gpus']} GPUs)"
    ax.plot(xs([best]), ys([best]), "r*", markersize=16, label=label)
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("tokens/s per GPU")
    ax.set_title(plan_title(result["request"]) + f"\n{result['batching']} batching",
                 fontsize=9)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def _layout(c: Mapping[str, Any]) -> str:
    return f"tp={c['tp']} ep={c['ep']} pp={c['pp']} dp={c['dp']} x{c['replicas']}"
