"""The fuzzers extended to the other ways in (issue #26): measurement CSVs (calibrate),
nsys kernel summaries and kernel maps (diagnose), Hugging Face configs (import-hf). Every
case is a result or a located SpecError, never another exception, within the time and
memory limits of tests/test_fuzz.py."""
from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings, strategies as st

from infest.compiler.analyses.calibrate import read_measurements
from infest.compiler.analyses.nsys import read_kern_sum, read_mapping
from infest.compiler.hf.importer import import_hf
from infest.dsl.errors import SpecError
from tests.test_fuzz import FUZZ, bounded, fresh

ROOT = Path(__file__).parents[1]
NSYS = (ROOT / "tests" / "fixtures" / "nsys" / "llama_decode.csv").read_text()
MAP = (ROOT / "tests" / "fixtures" / "nsys" / "llama.map").read_text()
QWEN = json.loads((ROOT / "tests" / "fixtures" / "hf" / "Qwen--Qwen3-8B.config.json").read_text())
CSV_HEAD = "spec,hardware,tp,ep,pp,dp,policy,engine,phase,B,N,T,step_s\n"
CSV_ROW = "llama3_1_8b,h100_sxm,1,,,,,,decode,8,4096,1,0.0123\n"
# Cells a hostile or careless file holds: Unicode digits, huge and tiny numbers, controls.
CELLS = ["", "1", "0", "-1", "²", "١٢", "1_0", "nan", "inf", "1e-320", "1e300", "9" * 400,
         "x" * 5000, "\x00", "\u202e", '"', '""', ",", "\n", "\r", "\u2028", "0x10", "1.5"]
# JSON values for a config field.
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                   st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(CELLS),
                   st.lists(st.integers(-5, 10**6), max_size=4),
                   st.dictionaries(st.sampled_from(["factor", "rope_type", "bits", "type",
                                                    "original_max_position_embeddings"]),
                                   st.one_of(st.integers(-10, 10**9), st.floats(), st.text(max_size=5)),
                                   max_size=3))


def reports(fn, *args) -> None:
    """The contract: returns, or raises a SpecError with a message and no raw controls."""
    with bounded():
        try:
            fn(*args)
        except SpecError as exc:
            assert exc.diagnostics and str(exc)
            assert not any(c in str(exc) for c in "\x1b\x00\u202e")


@settings(FUZZ, max_examples=60)
@given(cells=st.lists(st.sampled_from(CELLS), min_size=1, max_size=6),
       columns=st.lists(st.integers(0, 12), min_size=1, max_size=6))
def test_measurement_csv_cells(tmp_path: Path, cells: list[str], columns: list[int]) -> None:
    row = CSV_ROW.rstrip("\n").split(",")
    for column, cell in zip(columns, cells):
        row[column] = cell
    path = fresh(tmp_path) / "m.csv"
    path.write_text(CSV_HEAD + ",".join(row) + "\n", errors="surrogatepass")
    reports(read_measurements, path)


@settings(FUZZ, max_examples=60)
@given(cut=st.integers(0, len(NSYS)), piece=st.sampled_from(CELLS + ['"a,b"', "1e400"]))
def test_nsys_kernel_summary(tmp_path: Path, cut: int, piece: str) -> None:
    path = fresh(tmp_path) / "k.csv"
    path.write_text(NSYS[:cut] + piece + NSYS[cut:])
    reports(read_kern_sum, path)


@settings(FUZZ, max_examples=40)
@given(cut=st.integers(0, len(MAP)), piece=st.sampled_from(CELLS + ["= linear", "*"]))
def test_kernel_map(tmp_path: Path, cut: int, piece: str) -> None:
    path = fresh(tmp_path) / "k.map"
    path.write_text(MAP[:cut] + piece + MAP[cut:])
    reports(read_mapping, path, {"linear", "norm", "elementwise", "comm", "ignore", "attention"})


@settings(FUZZ, max_examples=80)
@given(fields=st.dictionaries(st.sampled_from(sorted(QWEN) + ["rope_scaling",
                                                             "quantization_config"]),
                              VALUES, min_size=1, max_size=3))
def test_hf_config_fields(tmp_path: Path, fields: dict) -> None:
    path = fresh(tmp_path) / "config.json"
    path.write_text(json.dumps({**QWEN, **fields}))
    reports(import_hf, path)
