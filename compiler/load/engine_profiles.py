"""Engine profiles shipped as data: specs/engines/<name>.json, one file per engine.

Each file is one JSON object:

    {"name": "vllm", "doc": "...", "fused": true,
     "launch_overhead": {"value": 1.5e-6, "source": "..."},
     "fields": {"step_overhead": {"value": 2e-4, "source": "..."}, ...}}

An optional "family" names the engine a profile is a build or an era of (vllm-rocm:
vllm; sglang-0.4: sglang): calibration (compiler/analyses/fit.py) pools a family's
offsets, so a build seen on one GPU only still learns what its engine pays elsewhere.

`fields` sets the estimate's parameters (compiler/load/fields.py, role "estimate") and the
efficiencies (eff_mem, eff_flops, eff_link) an engine reaches; every number carries its
source. A hardware file's own field and --set win over the engine's (the engine is a
default, the measured GPU is not). A malformed file is an error naming it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping

from infest.dsl.errors import Span, fail

MAX_PROFILE_BYTES = 64 * 1024      # a profile is a few dozen lines
MAX_PROFILE_FIELDS = 64
MAX_NAME_CHARS = 64                # an engine's or a family's name


@dataclass(frozen=True)
class Profile:
    """A loaded engine profile: whether fusions apply, the per-kernel floor, field values,
    and the engine family it belongs to (its own name when it names none)."""

    name: str
    doc: str
    fused: bool
    launch_overhead: Fraction | None
    fields: Mapping[str, Fraction]
    sources: Mapping[str, str]
    family: str


def engines_dir() -> Path:
    """The folder of shipped engine profiles."""
    from infest.compiler.load.loader import shipped_dir
    return shipped_dir() / "engines"


def load_profiles(folder: Path | None = None) -> dict[str, Profile]:
    """Every profile in the folder (default: the shipped ones), by name; a family must
    name a profile of the same folder (a typo would pool a build with nothing)."""
    folder = engines_dir() if folder is None else folder
    files = sorted(folder.glob("*.json"))
    profiles = {p.name: (p, f) for p, f in ((read_profile(f), f) for f in files)}
    for profile, path in profiles.values():
        if profile.family not in profiles:
            raise fail(Span(str(path), 1, 1, 1, 2),
                       f"family '{profile.family[:MAX_NAME_CHARS]}' names no engine profile",
                       f"known: {', '.join(sorted(profiles))}")
    return {name: p for name, (p, _) in profiles.items()}


def read_profile(path: Path) -> Profile:
    """One profile file, checked: known fields, numbers with sources, values in range."""
    from infest.compiler.load.fields import FIELDS
    from infest.compiler.load.hardware import in_range, sign_rule
    where = Span(str(path), 1, 1, 1, 2)
    if path.stat().st_size > MAX_PROFILE_BYTES:
        raise fail(where, f"engine profile larger than {MAX_PROFILE_BYTES} bytes (MAX_PROFILE_BYTES)")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise fail(Span(str(path), exc.lineno, exc.colno, exc.lineno, exc.colno + 1),
                   f"engine profile is not JSON: {exc.msg}") from None
    raw = data.get("fields", {})
    if not isinstance(raw, dict) or len(raw) > MAX_PROFILE_FIELDS:
        raise fail(where, f"'fields' must be an object of at most {MAX_PROFILE_FIELDS} entries")
    fields, sources = {}, {}
    for name, entry in raw.items():
        if name not in FIELDS or not FIELDS[name].hardware:
            raise fail(where, f"engine profile sets unknown field '{name}'")
        fields[name], sources[name] = _number(entry, name, where)
        if not in_range(name, fields[name]):
            raise fail(where, f"'{name}' must be {sign_rule(name)}")
    launch = data.get("launch_overhead")
    if launch is not None:
        launch, sources["launch_overhead"] = _number(launch, "launch_overhead", where)
    name = str(data.get("name", path.stem))
    family = data.get("family", name)
    if not isinstance(family, str) or not family or len(family) > MAX_NAME_CHARS:
        raise fail(where, f"'family' must be an engine name of 1 to {MAX_NAME_CHARS} characters",
                   'e.g. "family": "vllm" for a build of vLLM')
    return Profile(name, str(data.get("doc", "")), bool(data.get("fused", True)), launch,
                   fields, sources, family)


def _number(entry: Any, name: str, where: Span) -> tuple[Fraction, str]:
    """(value, source) of one {"value": number, "source": text} entry."""
    if not isinstance(entry, dict) or not isinstance(entry.get("value"), (int, float)) \
            or isinstance(entry.get("value"), bool) or not entry.get("source"):
        raise fail(where, f"'{name}' needs {{\"value\": number, \"source\": text}}")
    return Fraction(str(entry["value"])), str(entry["source"])
