"""The workbook's Plan sheet, edited like a planner would and recalculated by real
LibreOffice, equals `infest serve` (and a `plan` answer) for the same inputs (1e-9)."""
from __future__ import annotations

import math
from pathlib import Path

import openpyxl
import pytest

from infest.compiler.api import analyze
from infest.compiler.analyses.plan import Demand, plan
from infest.compiler.analyses.serve import METRIC_KEYS, Serving, Request, serve
from infest.exports.workbook.xlsx import write_workbook
from infest.exports.workbook.xlsx_plan import Phases
from workbooks import edit_and_recalculate, named_cell

MODELS = Path(__file__).parents[1] / "specs" / "models"


def _serving(spec: str, hw: str, policy: str | None = None) -> Phases:
    return Phases(*(analyze(MODELS / spec, hw=hw, phase=p, policy=policy)
                     for p in ("decode", "prefill")))


def _recalculated(tmp_path: Path, serving: Phases, edits: dict, soffice: str):
    """Write the workbook, type `edits` into plan_<key> cells, recalculate."""
    (tmp_path / "in").mkdir()
    src = write_workbook(serving.decode, tmp_path / "in" / "book.xlsx", {}, serving)
    return edit_and_recalculate(src, {f"plan_{k}": v for k, v in edits.items()},
                                tmp_path / "out", soffice)


def _value(wb: openpyxl.Workbook, key: str):
    return named_cell(wb, f"plan_{key}").value


# serve's bound metrics: all but gpus and fits (the layout's, not the step time's).
BOUND_KEYS = [k for k in METRIC_KEYS if k not in ("gpus", "fits")]


def _assert_metrics(wb, want: dict, prefix: str = "") -> None:
    for key in BOUND_KEYS if prefix else METRIC_KEYS:
        got = _value(wb, prefix + key)
        if isinstance(want[key], bool):
            assert got is want[key], key
        else:
            assert got == pytest.approx(want[key], rel=1e-9), prefix + key


# (spec, hw, policy, Plan sheet edits). Request defaults on the sheet: 64 users, C = 16,
# ISL 1024, OSL 256 (255 decode steps > 32: the 32 slice midpoints), limits 50 ms / 2 s.
CASES = [
    ("llama3_1_8b.arch", "h100_sxm", None, {}),
    # OSL - 1 = 19 <= 32: every context counted; dp = 2 does not divide C = 5, so the
    # busiest rank carries 3 and B = 6; tp = 2 splits the layers.
    ("llama3_1_8b.arch", "h100_sxm", None,
     {"isl": 3000, "osl": 20, "concurrency": 5, "users": 100, "tp": 2, "dp": 2}),
    ("qwen3_30b_a3b.arch", "h200_sxm", "full",
     {"isl": 8000, "osl": 100, "concurrency": 32, "tp": 4, "ep": 4, "tpot_max": 5}),
    # 4,096 x 30,000 tokens of KV cannot fit one H100: fits and ok FALSE.
    ("llama3_1_8b.arch", "h100_sxm", None, {"isl": 30000, "osl": 40, "concurrency": 4096}),
]


@pytest.mark.parametrize("spec,hw,policy,edits", CASES,
                         ids=["llama-defaults", "llama-tp2-dp2-short", "qwen3-tp4-ep4", "unfit"])
def test_plan_sheet_equals_serve(tmp_path: Path, soffice: str, spec: str, hw: str,
                                 policy: str | None, edits: dict) -> None:
    serving = _serving(spec, hw, policy)
    engine = Serving(serving.decode, serving.prefill)
    wb = _recalculated(tmp_path, serving, edits, soffice)
    sheet = {k: _value(wb, k) for k in ("users", "concurrency", "isl", "osl", "tpot_max",
                                         "ttft_max", "tp", "ep", "pp", "dp")}
    layout = {k: sheet[k] for k in ("tp", "ep", "pp", "dp") if sheet[k] != 1}
    got = serve(engine, Request(sheet["isl"], sheet["osl"], sheet["concurrency"], "static"), layout)
    _assert_metrics(wb, got)
    _assert_metrics(wb, got["bound"], "bound_")
    replicas = math.ceil(sheet["users"] / sheet["concurrency"])
    assert _value(wb, "replicas") == replicas
    assert _value(wb, "gpus_needed") == replicas * got["gpus"]
    meets = got["tpot_s"] <= sheet["tpot_max"] / 1000 and got["ttft_s"] <= sheet["ttft_max"] / 1000
    assert _value(wb, "ok") is (got["fits"] and meets)


def test_unfit_case_really_does_not_fit(tmp_path: Path, soffice: str) -> None:
    """The last case is there for its FALSE: 4,096 sequences x 30,038 tokens x 32 layers x
    8 KV heads x 128 x 2 (K and V) x 2 bytes = 4,096 x 3.94 GB, far past 80 GB."""
    wb = _recalculated(tmp_path, _serving("llama3_1_8b.arch", "h100_sxm"), CASES[-1][3], soffice)
    assert _value(wb, "fits") is False and _value(wb, "ok") is False


def test_plan_answer_reproduces_on_the_sheet(tmp_path: Path, soffice: str) -> None:
    """`plan`'s best layout and concurrency, typed into the Plan sheet, give its GPUs,
    TTFT and TPOT."""
    serving = _serving("llama3_1_8b.arch", "h100_sxm", "full")
    engine = Serving(serving.decode, serving.prefill)
    demand = Demand(isl=2048, osl=128, users=300, tpot_max=0.03, batching="static")
    best = plan({"full": engine}, demand, {})["best"]
    edits = {"users": 300, "isl": 2048, "osl": 128, "tpot_max": 30,
             "concurrency": best["concurrency_per_replica"],
             **{k: best[k] for k in ("tp", "ep", "pp", "dp")}}
    wb = _recalculated(tmp_path, serving, edits, soffice)
    assert _value(wb, "gpus_needed") == best["gpus"]
    assert _value(wb, "replicas") == best["replicas"]
    for key in ("ttft_s", "tpot_s", "e2e_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user"):
        assert _value(wb, key) == pytest.approx(best[key], rel=1e-9), key
    assert _value(wb, "meets_tpot") is True


def test_every_serve_metric_has_a_plan_cell(tmp_path: Path) -> None:
    serving = _serving("llama3_1_8b.arch", "h100_sxm")
    src = write_workbook(serving.decode, tmp_path / "book.xlsx", {}, serving)
    names = openpyxl.load_workbook(src).defined_names
    assert all(f"plan_{key}" in names for key in METRIC_KEYS)
    assert all(f"plan_bound_{key}" in names for key in BOUND_KEYS)
