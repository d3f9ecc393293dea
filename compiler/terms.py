"""The time terms of a step: one table every stage derives its keys from.

An op instance takes at least the largest of its terms; a step the sum over ops. Each
term has a key (`t_<name>_s`), says whether it belongs to the hard bound (datasheet
peaks, perfect overlap: no engine beats it) or carries an assumption about the engine,
and names the binding-ceiling labels it splits into (memory time is reported as
"weights" or "kv" by what its bytes are). Adding a term is one entry here plus its
per-op form in `compiler/model.py` (`TERM_FORMS`).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimeTerm:
    """One term of an op's time bound."""

    name: str
    hard: bool                  # part of roofline_s (no engine can beat it)
    bounds: tuple[str, ...]     # binding-ceiling labels this term is reported as
    doc: str

    @property
    def key(self) -> str:
        """The op / step key of this term, e.g. `t_compute_s`."""
        return f"t_{self.name}_s"


TIME_TERMS = (
    TimeTerm("compute", True, ("compute",), "FLOPs / peak FLOP/s of the op's math dtype"),
    TimeTerm("memory", True, ("weights", "kv"), "HBM bytes / mem_bw"),
    TimeTerm("launch", False, ("launch",),
             "kernel launches x launch_overhead (an assumption about the engine)"),
    TimeTerm("comm", True, ("comm",),
             "collective calls: latency + bus factor x payload / link bandwidth"),
    TimeTerm("host", True, ("host",),
             "offloaded experts the step misses, fetched over the host link / host_bw"),
)
TERM_KEYS = tuple(t.key for t in TIME_TERMS)
HARD_KEYS = tuple(t.key for t in TIME_TERMS if t.hard)
# Binding-ceiling labels in tie order (the first of equal terms wins).
BOUND_TERMS = tuple(label for t in TIME_TERMS for label in t.bounds)
