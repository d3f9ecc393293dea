"""One table per concept: hardware fields (compiler/load/fields.py) and result keys
(compiler/core/keys.py). Each test checks that a consumer reads the table, not a copy."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.core.keys import (MEMORY_KEYS, OP_KEYS, PARALLEL, PARALLEL_KEYS,
                                       RESULT_KEYS, STEP_KEYS, key_info)
from infest.compiler.load.fields import (CATALOGUE, EFFICIENCIES, FIELD_TABLE, FIELDS,
                                         HARDWARE_FIELDS, MAY_BE_ZERO)
from infest.dsl.errors import SpecError
from infest.exports.cli.main import main

MODELS = Path(__file__).parents[1] / "specs" / "models"
LLAMA8 = MODELS / "llama3_1_8b.arch"


# ---- fields ------------------------------------------------------------------------

def test_every_field_has_a_unit_a_role_and_a_sourced_default() -> None:
    for f in FIELD_TABLE:
        assert f.doc and f.role, f.name
        if f.default is not None:
            assert f.source, f"{f.name}: a default says where it comes from"
        if f.catalogue:
            assert f.hardware, f"{f.name}: a catalogue field is a hardware field"
    # The efficiencies' documented defaults (README, "How to read the numbers").
    assert EFFICIENCIES == {"eff_mem": Fraction(4, 5), "eff_flops": Fraction(7, 10),
                            "eff_link": Fraction(4, 5)}


def _block(tmp_path: Path, extra: str) -> Path:
    spec = tmp_path / "hw.arch"
    spec.write_text("hardware g { mem_capacity = 80 GB; mem_bw = 3 TB/s; launch_overhead = 4 us\n"
                    f"  flops_bf16 = 900 TFLOP/s; {extra} }}\n")
    return spec


@pytest.mark.parametrize("extra, message", [
    ("B = 5", "'B' is not a hardware field"),             # an input, not a field
    ("hit_rate = 0.5", "'hit_rate' is not a hardware field"),  # offload: per model
    ("mem_bww = 3 TB/s", "unknown hardware field 'mem_bww'"),
])
def test_a_hardware_block_sets_hardware_fields_only(tmp_path: Path, extra: str,
                                                    message: str) -> None:
    with pytest.raises(SpecError, match=message):
        analyze(LLAMA8, hw=str(_block(tmp_path, extra)))


def test_peaks_may_be_zero_but_bf16_and_bandwidths_may_not(tmp_path: Path) -> None:
    a = analyze(LLAMA8, hw=str(_block(tmp_path, "flops_fp4 = 0 TFLOP/s")))
    assert a.evaluate({"flops_fp8": 0})["step"]["time_s"] > 0  # what the table allows
    for name in ("flops_bf16", "mem_bw"):
        assert name not in MAY_BE_ZERO
        with pytest.raises(SpecError, match="must be positive"):
            a.evaluate({name: 0})


def test_measured_ceilings_left_blank_keep_the_default_efficiencies() -> None:
    # h100_sxm carries mem_bw_measured = 0 (not measured): eff_mem stays 0.8; h200_sxm's
    # measured 4.3 of 4.8 TB/s gives 4.3 / 4.8 = 0.8958.
    h100 = analyze(LLAMA8, hw="h100_sxm").evaluate({})["inputs"]
    h200 = analyze(LLAMA8, hw="h200_sxm").evaluate({})["inputs"]
    assert h100["eff_mem"] == 0.8 and h200["eff_mem"] == pytest.approx(4.3 / 4.8)


def test_consumers_read_the_field_table() -> None:
    from infest.compiler.analyses.calibrate import FITTED
    from infest.compiler.load.hardware import expected_dimension, field_doc
    assert set(FITTED) <= set(EFFICIENCIES)          # calibration fits table fields
    for name in HARDWARE_FIELDS:                      # parser and workbook describe them
        assert expected_dimension(name) == FIELDS[name].dimension
        assert field_doc(name) == (FIELDS[name].doc, FIELDS[name].unit)
    assert {"flops_fp4", "mem_bw_measured", "net_bw"} <= set(CATALOGUE)


# ---- result keys ---------------------------------------------------------------------

def test_every_result_key_has_a_unit_and_integerness() -> None:
    for key in MEMORY_KEYS + STEP_KEYS + OP_KEYS + PARALLEL_KEYS + ("total", "active"):
        assert key in RESULT_KEYS, key
    assert PARALLEL_KEYS == PARALLEL + ("gpus",)   # the layout tuple, spelled once
    assert key_info("step.kernels") == key_info("kernels")
    with pytest.raises(KeyError):
        key_info("no_such_key")


def test_sweep_workbook_and_json_agree_on_units_and_integers() -> None:
    from infest.exports.cli.cmd_sweep import metric_unit
    from infest.exports.workbook.book import unit_of
    for key in ("kernels", "collectives", "max_batch", "tokens_per_s", "weights_bytes"):
        assert metric_unit(f"step.{key}") == unit_of(key) == RESULT_KEYS[key].unit
    assert unit_of("kernels") == "kernels"          # the workbook said "launches" before
    r = analyze(LLAMA8, hw="h100_sxm").evaluate({"tp": 2})
    for key in ("kernels", "collectives"):
        assert isinstance(r["step"][key], int)
    assert isinstance(r["memory"]["max_batch"], int)


def test_sweep_cells_of_an_integer_metric_are_integers(capsys) -> None:
    assert main(["sweep", str(LLAMA8), "--hw", "h100_sxm", "--B", "1,2", "--N", "4k",
                 "--metric", "collectives", "--over", "tp=2", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"unit": "calls"' in out and "66" in out and "66.0" not in out
