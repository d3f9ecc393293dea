"""The collection of published Hugging Face configs (tests/fixtures/hf/collection): read
its MANIFEST.csv, import each config as `infest import-hf` does and compare the spec's
params with the publisher's stated totals (shared test helper, also used by
bench/hf_collection.py).

A stated figure is written as the publisher wrote it ("235B", "3.21B", "1T") or as an
exact count ("9241705984"); `tolerance` says which interval it stands for (`interval`),
one value for both figures or `total/active` ("round/trunc"). `excludes` says which
tables a figure leaves out ("active=embedding", "total=embedding+lm_head"), computed from
the config's vocab_size x hidden_size, never from infest's output. `includes` says which
held weights a figure counts ("total=vision": Meta's 109B counts Llama 4's vision tower),
added from the spec's params.groups, so each row compares like with like (`compared`).
"""
from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from infest.compiler.api import load_model
from infest.compiler.hf.families import identifier
from infest.compiler.hf.importer import import_hf, sibling_quant_config
from infest.compiler.forms.model import _groups, _params
from infest.dsl.errors import SpecError

COLLECTION = Path(__file__).parent / "fixtures" / "hf" / "collection"
MANIFEST = COLLECTION / "MANIFEST.csv"
FIGURES = ("total", "active")
_SCALE = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_FIGURE = re.compile(r"(\d+(?:\.\d+)?)([KMBT]?)")
_TABLES = ("embedding", "lm_head")


@dataclass(frozen=True)
class Entry:
    """One row of MANIFEST.csv."""

    file: str               # relative to the collection folder
    model_type: str
    total_params: str       # the publisher's figure as written, or empty
    active_params: str
    tolerance: str          # `0.5%`, `round`, `trunc`, or `total/active` of those
    totals_source: str
    config_source: str
    excludes: str           # `total=embedding+lm_head;active=embedding`, or empty
    includes: str = ""      # held groups a figure counts: `total=vision`, or empty

    @property
    def path(self) -> Path:
        """The config file."""
        return (COLLECTION / self.file).resolve()

    @property
    def name(self) -> str:
        """`org--Model`, the file name without `.config.json`."""
        return Path(self.file).name.removesuffix(".config.json")

    def stated(self, figure: str) -> str:
        """The publisher's total or active figure as written ("" when none)."""
        return self.total_params if figure == "total" else self.active_params

    def tolerance_of(self, figure: str) -> str:
        """The tolerance of the total (first) or active (last) figure."""
        parts = self.tolerance.split("/")
        return parts[0] if figure == "total" else parts[-1]

    def excluded(self, figure: str) -> list[str]:
        """The tables (embedding, lm_head) the publisher's figure leaves out."""
        return _listed(self.excludes, figure)

    def included(self, figure: str) -> list[str]:
        """The held groups (vision, mtp) the publisher's figure counts."""
        return _listed(self.includes, figure)

    def compared(self) -> str:
        """What the total is compared as: the language model, less or plus what says."""
        less = "".join(f" - {t}" for t in self.excluded("total"))
        more = "".join(f" + {g}" for g in self.included("total"))
        return f"LM{less}{more}"


def _listed(spec: str, figure: str) -> list[str]:
    """The `+`-joined names after `figure=` in a `;`-separated column."""
    for item in filter(None, spec.split(";")):
        which, _, names = item.partition("=")
        if which == figure:
            return names.split("+")
    return []


@dataclass(frozen=True)
class Outcome:
    """What importing one config gave: (total, active) params, or the error's text."""

    counts: tuple[int, int] | None = None
    groups: dict[str, int] | None = None    # params.groups: held vision / mtp among them
    error: str | None = None        # a SpecError's message
    crash: str | None = None        # any other exception: a bug in import-hf


def read_manifest(path: Path = MANIFEST) -> list[Entry]:
    """Every row of the manifest, in file order."""
    with path.open(newline="") as fh:
        return [Entry(**row) for row in csv.DictReader(fh)]


def interval(figure: str, tolerance: str) -> tuple[Decimal, Decimal]:
    """[low, high) of the params a stated figure stands for.

    `N%`: N percent either side. `round`: half a unit of the figure's last significant
    digit either side ("8B" -> [7.5B, 8.5B), "3.21B" -> [3.205B, 3.215B); an integer's
    trailing zeros are not significant: "230B" -> [225B, 235B)). `trunc`: the figure up
    to one unit more, for publishers that cut digits off ("1.23B" -> [1.23B, 1.24B))."""
    match = _FIGURE.fullmatch(figure)
    if match is None:
        raise ValueError(f"not a parameter figure: {figure!r}")
    digits, suffix = match.groups()
    value = Decimal(digits) * _SCALE[suffix]
    if tolerance.endswith("%"):
        share = Decimal(tolerance[:-1]) / 100
        return value * (1 - share), value * (1 + share)
    unit = _last_digit_unit(digits) * _SCALE[suffix]
    if tolerance == "round":
        return value - unit / 2, value + unit / 2
    if tolerance == "trunc":
        return value, value + unit
    raise ValueError(f"unknown tolerance {tolerance!r}: N%, round or trunc")


def _last_digit_unit(digits: str) -> Decimal:
    """The value of one unit in the last significant digit ("3.21" -> 0.01, "230" -> 10)."""
    if "." in digits:
        return Decimal(1).scaleb(-len(digits.split(".")[1]))
    significant = digits.rstrip("0") or "0"
    return Decimal(10) ** (len(digits) - len(significant))


def import_counts(path: Path, workdir: Path) -> tuple[tuple[int, int], dict[str, int]]:
    """((total, active), params.groups) of a config imported as the CLI does (a ModelOpt
    quant config beside it included). Only the spec is elaborated: no closed forms, no
    hardware, which keeps a run over the whole collection to a few seconds."""
    text = import_hf(path, sibling_quant_config(path))
    spec = workdir / f"{identifier(path.name.removesuffix('.config.json'))}.arch"
    spec.write_text(text)
    model = load_model(spec)
    params, groups = _params(model), _groups(model)
    counts = (int(params["total"].xreplace(model.inputs)),
              int(params["active"].xreplace(model.inputs)))
    return counts, {g: int(n.xreplace(model.inputs)) for g, n in groups.items()}


def outcome(entry: Entry, workdir: Path) -> Outcome:
    """Import one entry; a SpecError is an expected outcome, anything else a crash."""
    try:
        counts, groups = import_counts(entry.path, workdir)
        return Outcome(counts=counts, groups=groups)
    except SpecError as exc:
        return Outcome(error=str(exc))
    except Exception as exc:  # noqa: BLE001 - any other exception is the finding
        return Outcome(crash=f"{type(exc).__name__}: {exc}")


def config_data(entry: Entry) -> dict[str, Any]:
    """The config as JSON data; NaN and Infinity read as floats (Python's json does)."""
    return json.loads(entry.path.read_text())


def table_params(data: dict[str, Any], tables: list[str]) -> int:
    """Params of the embedding table and/or the LM head: vocab_size x hidden_size each
    (from text_config when the model nests one); a tied head stores none."""
    if not tables:
        return 0
    text = data.get("text_config") or data
    size = text["vocab_size"] * text["hidden_size"]
    tied = text.get("tie_word_embeddings", data.get("tie_word_embeddings", False))
    unknown = set(tables) - set(_TABLES)
    if unknown:
        raise ValueError(f"unknown table {sorted(unknown)}: embedding or lm_head")
    return size * ("embedding" in tables) + size * ("lm_head" in tables and not tied)


def problems(entry: Entry, counts: tuple[int, int],
             groups: dict[str, int] | None = None) -> list[str]:
    """Each stated figure the imported counts miss, as a sentence (empty: all within);
    held groups the figure includes are added from params.groups (absent: a miss)."""
    data, found, groups = config_data(entry), [], groups or {}
    for figure, count in zip(FIGURES, counts):
        stated = entry.stated(figure)
        if not stated:
            continue
        missing = [g for g in entry.included(figure) if g not in groups]
        if missing:
            found.append(f"{figure}: the publisher counts {'+'.join(missing)}, which the "
                         "spec does not hold (the config does not describe it)")
            continue
        counted = count - table_params(data, entry.excluded(figure)) + \
            sum(groups[g] for g in entry.included(figure))
        low, high = interval(stated, entry.tolerance_of(figure))
        if not low <= counted < high:
            found.append(f"{figure} {counted / 1e9:.3f}B not in [{low / 10**9:g}B, "
                         f"{high / 10**9:g}B) ({stated} {entry.tolerance_of(figure)})")
    return found


def names_what_is_missing(message: str, entry: Entry) -> bool:
    """Whether an import error names what import-hf lacks: the unknown model_type, or
    a key of the config (or of the quant config beside it) it cannot model."""
    if "unknown model_type" in message or "missing required config field" in message:
        return True
    keys = _keys(config_data(entry))
    quant = sibling_quant_config(entry.path)
    if quant is not None:
        keys |= _keys(json.loads(quant.read_text()))
    words = set(re.findall(r"[A-Za-z_][\w.]*", message))
    return any(key in words or f"{key}." in message for key in keys)


def _keys(data: Any) -> set[str]:
    """Every object key at any depth of JSON data."""
    if isinstance(data, dict):
        return set(data) | {k for value in data.values() for k in _keys(value)}
    if isinstance(data, list):
        return {k for value in data for k in _keys(value)}
    return set()
