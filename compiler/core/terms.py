"""The time terms of a step: one table every stage derives its keys from.

An op instance takes at least the largest of its terms; a step the sum over ops. Each
term has a key (`t_<name>_s`), says whether it belongs to the hard bound (datasheet
peaks, perfect overlap: no engine beats it) or carries an assumption about the engine,
and names the binding-ceiling labels it splits into (memory time is reported as
"weights" or "kv" by what its bytes are), and names the efficiency (a hardware field,
compiler/load/hardware.py EFFICIENCIES) that derates it in the estimate: the estimate divides the term by
that efficiency in (0, 1], so it is never below the bound. Adding a term is one entry
here plus its per-op form in `compiler/forms/model.py` (`TERM_FORMS`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class TimeTerm:
    """One term of an op's time bound."""

    name: str
    hard: bool                  # part of roofline_s (no engine can beat it)
    bounds: tuple[str, ...]     # binding-ceiling labels this term is reported as
    doc: str
    eff: str | None = None      # the efficiency dividing it in the estimate (None: as is)

    @property
    def key(self) -> str:
        """The op / step key of this term, e.g. `t_compute_s`."""
        return f"t_{self.name}_s"


TIME_TERMS = (
    TimeTerm("compute", True, ("compute",), "FLOPs / peak FLOP/s of the op's math dtype",
             "eff_flops"),
    TimeTerm("memory", True, ("weights", "kv"), "HBM bytes / mem_bw", "eff_mem"),
    TimeTerm("launch", False, ("launch",),
             "kernel launches x launch_overhead (an assumption about the engine)"),
    TimeTerm("comm", True, ("comm",),
             "collective calls: latency + bus factor x payload / link bandwidth", "eff_link"),
    TimeTerm("host", True, ("host",),
             "offloaded experts the step misses, fetched over the host link / host_bw",
             "eff_link"),
)
TERM_KEYS = tuple(t.key for t in TIME_TERMS)
HARD_KEYS = tuple(t.key for t in TIME_TERMS if t.hard)
# Binding-ceiling labels in tie order (the first of equal terms wins).
BOUND_TERMS = tuple(label for t in TIME_TERMS for label in t.bounds)


def derated(terms: Mapping[str, Any], effs: Mapping[str, Any]) -> list[Any]:
    """Each term at achievable ceilings: divided by its efficiency (a term with none, or
    one the forms do not use, as it is). An op's estimate is the largest of these."""
    return [terms[t.key] / effs.get(t.eff, 1.0) if t.eff else terms[t.key] for t in TIME_TERMS]
