"""The workbook's Plan sheet, edited like a planner would and recalculated by real
LibreOffice, equals `infest serve` under its default scheduling (continuous batching) and a
`plan` answer for the same inputs (1e-9), in both regimes of the continuous model."""
from __future__ import annotations

import math
from pathlib import Path

import openpyxl
import pytest

from infest.compiler.analyses.arrivals import QUEUE_KEYS
from infest.compiler.api import analyze
from infest.compiler.analyses.plan import Demand, plan
from infest.compiler.analyses.serve import METRIC_KEYS, Serving, Request, serve
from infest.exports.workbook.xlsx import write_workbook
from workbooks import edit_and_recalculate, named_cell

MODELS = Path(__file__).parents[1] / "specs" / "models"


def _serving(spec: str, hw: str, policy: str | None = None):
    return analyze(MODELS / spec, hw=hw, policy=policy)


def _recalculated(tmp_path: Path, decode, edits: dict, soffice: str):
    """Write the workbook, type `edits` into plan_<key> cells (in_<name>: that input's),
    recalculate."""
    (tmp_path / "in").mkdir()
    src = write_workbook(decode, tmp_path / "in" / "book.xlsx", {}, decode)
    return edit_and_recalculate(src, {k if k.startswith("in_") else f"plan_{k}": v
                                      for k, v in edits.items()}, tmp_path / "out", soffice)


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
# K = 2048, ISL 1024, OSL 256, limits 50 ms / 2 s.
CASES = [
    # c = 16 clients: the prompt's chunk q = 2048 - 15 = 2033 >= 1024 tokens, one chunk
    # step, 15 x 1 = 15 <= 255 decode steps: prompts alone, one chunk row counted.
    ("llama3_1_8b.arch", "h100_sxm", None, {}),
    # dp = 2 over C = 5: 3 clients on the busiest rank; q = 256 - 2 = 254, so an 8,000-token
    # prompt takes P = ceil(8000 / 254) = 32 chunk steps > 16: the 16 slice midpoints;
    # 2 x 32 = 64 <= 299 decode steps: alone. The scheduler looks for new requests every
    # 10 decode steps (poll_interval): the residual's pure-decode cycle is 10 steps.
    ("llama3_1_8b.arch", "h100_sxm", None,
     {"isl": 8000, "osl": 300, "concurrency": 5, "chunk": 256, "users": 100, "dp": 2,
      "in_poll_interval": 10}),
    # 64 clients, K = 512: q = 449, P = ceil(3000 / 449) = 7, 63 x 7 = 441 > 49 decode
    # steps: prompts shared, and 64 x (3000 + 49) / 512 - 49 = 332.1 steps to the first
    # token (the budget binds); tp = 4, ep = 4 on the MoE, 0.7 of its collectives overlapped.
    ("qwen3_30b_a3b.arch", "h200_sxm", "full",
     {"isl": 3000, "osl": 50, "concurrency": 64, "chunk": 512, "tp": 4, "ep": 4, "tpot_max": 5,
      "in_comm_overlap": 0.7}),
    # 4,080 x 30,000 tokens of KV cannot fit one H100: fits and ok FALSE.
    ("llama3_1_8b.arch", "h100_sxm", None, {"isl": 30000, "osl": 40, "concurrency": 4080}),
    # The same under an engine that lets weights + KV fill 0.9 of the memory (vLLM's
    # --gpu-memory-utilization): the sheet's mem_fraction input moves its KV cap.
    ("llama3_1_8b.arch", "h100_sxm", None,
     {"isl": 30000, "osl": 40, "concurrency": 4080, "in_mem_fraction": 0.9}),
    # And an engine that keeps 10 GB a GPU back for its own buffers (typed in GB).
    ("llama3_1_8b.arch", "h100_sxm", None,
     {"isl": 30000, "osl": 40, "concurrency": 4080, "in_mem_fraction": 0.9,
      "in_mem_reserve": 10}),
]
# Inputs typed in a human unit, as serve takes them in base units (GB -> bytes).
_BASE = {"in_mem_reserve": 1e9}


@pytest.mark.parametrize("spec,hw,policy,edits", CASES,
                         ids=["llama-alone", "llama-dp2-32-chunks", "qwen3-tp4-ep4-shared", "unfit",
                              "unfit-engine-share", "unfit-engine-reserve"])
def test_plan_sheet_equals_serve(tmp_path: Path, soffice: str, spec: str, hw: str,
                                 policy: str | None, edits: dict) -> None:
    decode = _serving(spec, hw, policy)
    wb = _recalculated(tmp_path, decode, edits, soffice)
    sheet = {k: _value(wb, k) for k in ("users", "concurrency", "chunk", "isl", "osl",
                                         "tpot_max", "ttft_max", "tp", "ep", "pp", "dp")}
    layout = {k: sheet[k] for k in ("tp", "ep", "pp", "dp") if sheet[k] != 1}
    layout.update({k[3:]: v * _BASE.get(k, 1) for k, v in edits.items() if k.startswith("in_")})
    got = serve(Serving(decode, decode), Request(sheet["isl"], sheet["osl"],
                                                 sheet["concurrency"], chunk=sheet["chunk"]), layout)
    assert got["batching"] == "continuous"
    _assert_metrics(wb, got)
    _assert_metrics(wb, got["bound"], "bound_")
    assert _value(wb, "alone") is (got["schedule"]["prompts"] == "alone")
    assert _value(wb, "chunks") == got["schedule"]["chunks_per_prompt"]
    for key, want in got["queueing"].items():      # the closed loop's TTFT terms
        cell = named_cell(wb, "in_poll_interval") if key == "poll_interval" else \
            named_cell(wb, f"plan_{key}")
        assert cell.value == pytest.approx(want, rel=1e-9, abs=1e-15), key
    if "in_poll_interval" in edits:   # (busy t_m + (1 - busy) 10 t_u) / 2, c = 3 > 1
        busy, t_m, t_u = (_value(wb, k) for k in ("busy", "mixed_s", "pure_s"))
        assert _value(wb, "residual_s") == pytest.approx((busy * t_m + (1 - busy) * 10 * t_u) / 2)
    replicas = math.ceil(sheet["users"] / sheet["concurrency"])
    assert _value(wb, "replicas") == replicas
    assert _value(wb, "gpus_needed") == replicas * got["gpus"]
    meets = got["tpot_s"] <= sheet["tpot_max"] / 1000 and got["ttft_s"] <= sheet["ttft_max"] / 1000
    assert _value(wb, "ok") is (got["fits"] and meets)
    if edits.get("chunk") == 256:    # the slices: 32 chunk steps, 16 rows counted
        assert (_value(wb, "chunks"), _value(wb, "points")) == (32, 16)
    if "in_mem_reserve" in edits:
        # (60,908,206,489.6 - 10,000,000,000) / 3,937,271,808 = 50,908,206,489.6 /
        # 3,937,271,808 = 12.93: 12 run (13 would need 51,184,533,504 B); 4,080 / 12 = 340.
        assert (_value(wb, "kv_cap"), _value(wb, "clients")) == (12, 12)
        assert _value(wb, "admission_share") == 340
        assert got["admission"]["admitted_per_scheduler"] == 12
    elif edits.get("in_mem_fraction") == 0.9:
        # (0.9 x 85,520,809,984 - 16,060,522,496) / 3,937,271,808 = 60,908,206,489.6 /
        # 3,937,271,808 = 15.47: 15 run; 4,080 / 15 = 272 clients a running one.
        assert (_value(wb, "kv_cap"), _value(wb, "clients")) == (15, 15)
        assert _value(wb, "admission_share") == 272
        assert got["admission"]["admitted_per_scheduler"] == 15
    elif edits.get("concurrency") == 4080:   # 4,080 x 30,038 tokens x 131,072 bytes >> 85.5 GB
        assert _value(wb, "fits") is False and _value(wb, "ok") is False
        # (81,559 MiB = 85.52 GB - 8.03e9 x 2 B) / (30,039 x 131,072 B) = 69.46 / 3.937
        # = 17.64: 17 run, the other 4,063 wait (memory admission: 4,080 / 17 = 240 clients
        # a running one).
        assert (_value(wb, "kv_cap"), _value(wb, "clients")) == (17, 17)
        assert _value(wb, "admission_share") == 240
        assert got["admission"]["admitted_per_scheduler"] == 17
    if edits.get("chunk") == 512:    # the budget binds: (64 x 3049 / 512 - 49) steps
        assert _value(wb, "ttft_steps") == pytest.approx(64 * 3049 / 512 - 49, rel=1e-12)


def test_plan_sheet_equals_serve_under_an_engine_profile(tmp_path: Path, soffice: str) -> None:
    # sglang's profile sets a per-step and a per-request overhead (specs/engines/sglang.json):
    # every mixed and pure step on the sheet adds the first, the estimate's TTFT the second
    # once, before the closed loop's queueing (the bound's neither); the sheet's defaults
    # equal serve's.
    decode = analyze(MODELS / "llama3_1_8b.arch", hw="h200_sxm", engine="sglang")
    wb = _recalculated(tmp_path, decode, {}, soffice)
    got = serve(Serving(decode, decode), Request(1024, 256, 16, chunk=2048), {})
    assert decode.evaluate()["inputs"]["request_overhead"] > 0
    _assert_metrics(wb, got)
    _assert_metrics(wb, got["bound"], "bound_")
    request = decode.evaluate()["inputs"]["request_overhead"]
    mixed = _value(wb, "mixed_s")
    bare = _value(wb, "ttft_steps") * mixed + request
    assert _value(wb, "bare_ttft_s") == pytest.approx(bare, rel=1e-12)
    queued = sum(_value(wb, f"{k}_s") for k in QUEUE_KEYS)
    assert _value(wb, "ttft_s") == pytest.approx(bare + queued, rel=1e-12)


def test_plan_answer_reproduces_on_the_sheet(tmp_path: Path, soffice: str) -> None:
    """`plan`'s best layout and concurrency, typed into the Plan sheet, give its GPUs,
    TTFT and TPOT."""
    serving = _serving("llama3_1_8b.arch", "h100_sxm", "full")
    engine = Serving(serving, serving)
    demand = Demand(isl=2048, osl=128, users=300, tpot_max=0.03)
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
    src = write_workbook(serving, tmp_path / "book.xlsx", {}, serving)
    names = openpyxl.load_workbook(src).defined_names
    assert all(f"plan_{key}" in names for key in METRIC_KEYS)
    assert all(f"plan_bound_{key}" in names for key in BOUND_KEYS)
