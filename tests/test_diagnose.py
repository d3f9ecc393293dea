"""`infest diagnose`: candidate ceilings, verdicts, Amdahl, depth, nsys, the CLI contract.

Numbers are derived by hand in the comments (the issue's worked examples)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.compiler.core.symbols import sym
from infest.compiler.analyses.diagnose import (Measured, amdahl, bandwidth, binding, comm, default_blocks,
                                      diagnose, launch)
from infest.exports.cli.main import main

ROOT = Path(__file__).parents[1]
LLAMA = str(ROOT / "specs" / "models" / "llama3_1_8b.arch")
FIX = ROOT / "tests" / "fixtures" / "nsys"
CONTRACT = {"measured", "bandwidth", "comm", "launch", "occupancy", "amdahl", "kernels",
            "faster_than_bound", "binding", "falsifier", "prediction"}


def _result(t_memory_s: float = 1e-3, kernels: int = 419) -> dict:
    """A minimal eval result: one token per step, the bound equal to the memory time."""
    return {"step": {"t_memory_s": t_memory_s, "time_s": t_memory_s, "roofline_s": t_memory_s,
                     "overlap_floor_s": t_memory_s,
                     "tokens_per_s": 1 / t_memory_s,
                     "kernels": kernels}, "ops": []}


def test_slow_kernels_are_not_launch_bound() -> None:
    # 281.6 ms / 2790 kernels = 0.1009 ms = 100.9 us per kernel: ~100 us, the kernels are slow
    la = launch(_result(), 281.6e-3, Measured(step_s=281.6e-3, kernels=2790), 4e-6, None)
    assert la["time_per_kernel_s"] == pytest.approx(100.9e-6, rel=1e-3)
    assert la["verdict"] == "not launch bound: the kernels themselves are slow"
    assert not la["fires"]


def test_short_kernels_are_launch_bound() -> None:
    # 16.6 ms / 2790 kernels = 5.95 us per kernel: under 10 us
    la = launch(_result(), 16.6e-3, Measured(step_s=16.6e-3, kernels=2790), 4e-6, None)
    assert la["time_per_kernel_s"] == pytest.approx(5.95e-6, rel=1e-3)
    assert la["verdict"] == "launch bound" and la["fires"]
    # share: 2790 launches x 4 us = 11.16 ms of 16.6 ms = 0.672
    assert la["share"] == pytest.approx(0.672, rel=1e-3)


def test_the_obvious_collective_is_two_percent() -> None:
    # 92 calls x 58.7 us = 5.4004 ms; 5.4004 / 281.6 = 0.01918, ~2%: not comm
    c = comm(_result(), 281.6e-3, Measured(step_s=281.6e-3, collectives=92, collective_time_s=58.7e-6))
    assert c["total_s"] == pytest.approx(5.4004e-3, rel=1e-9)
    assert c["share"] == pytest.approx(0.01918, rel=1e-3)
    assert c["verdict"] == "not comm" and c["measured"]


def test_model_collectives_are_read_defensively() -> None:
    # before the multi-GPU merge a result has no collectives: 0 calls, 0 s
    assert comm(_result(), 1e-3, Measured(step_s=1e-3))["total_s"] == 0
    # after it: 64 calls and 3.2 ms of t_comm_s -> 50 us per call
    r = _result()
    r["step"].update(collectives=64, t_comm_s=3.2e-3)
    c = comm(r, 10e-3, Measured(step_s=10e-3))
    assert c["time_per_call_s"] == pytest.approx(50e-6) and c["share"] == pytest.approx(0.32)
    assert c["verdict"] == "comm bound"


def test_bandwidth_ceiling_far_above_rules_bandwidth_out() -> None:
    # bound 0.1 ms, measured 100 ms: the ceiling (10,000 tok/s) is 1000x the measurement
    bw = bandwidth(_result(t_memory_s=0.1e-3), 100e-3)
    assert bw["ratio"] == pytest.approx(1000)
    assert bw["ceiling_tokens_per_s"] == pytest.approx(10_000)
    assert bw["verdict"] == "not bandwidth: look elsewhere"
    assert bandwidth(_result(t_memory_s=1e-3), 1.5e-3)["verdict"] == "bandwidth bound"  # 1.5x
    assert bandwidth(_result(t_memory_s=1e-3), 5e-3)["verdict"] == "partly bandwidth"    # 5x


def test_amdahl_examples() -> None:
    # s = (1/2.44 - 1/8) / (1 - 1/8) = (0.40984 - 0.125) / 0.875 = 0.3255
    a = amdahl(8, 2.44)
    assert a["serial_fraction"] == pytest.approx(0.3255, abs=1e-4)
    # one more GPU: 1 / (0.3255 + 0.6745 / 9) = 1 / 0.40050 = 2.497x
    assert a["next_gpu_speedup"] == pytest.approx(2.497, abs=1e-3)
    assert a["limit_speedup"] == pytest.approx(1 / 0.3255, rel=1e-3)
    # after the parallel part got 3x faster: (1/1.10 - 0.125) / 0.875 = 0.8961
    assert amdahl(8, 1.10)["serial_fraction"] == pytest.approx(0.8961, abs=1e-4)
    assert amdahl(8, 8)["serial_fraction"] == 0 and amdahl(8, 8)["limit_speedup"] is None


def test_binding_rules() -> None:
    def cands(ratio, comm_share, launch_fires, occ_share):
        return {"bandwidth": {"ratio": ratio, "share": 1 / ratio},
                "comm": {"share": comm_share},
                "launch": {"fires": launch_fires, "share": 0.67 if launch_fires else 0.04},
                "occupancy": {"share": occ_share, "flagged": ["q"] if occ_share else []}}
    assert binding(cands(1.5, 0.5, True, 0.5)) == ("bandwidth", False)   # within 2x wins
    assert binding(cands(50, 0.02, True, 0.2)) == ("launch", False)      # 67% > 20%
    assert binding(cands(50, 0.8, True, 0.2)) == ("comm", False)         # 80% > 67%
    assert binding(cands(1000, 0.02, False, 0.0)) == ("occupancy", True)  # by elimination
    # a step under bytes / mem_bw rules bandwidth out (and beats the floor): never binding
    out = cands(0.5, 0.02, True, 0.0)
    out["bandwidth"]["ruled_out"] = True
    assert binding(out) == ("launch", False)


def test_default_grids() -> None:
    a = analyze(LLAMA, hw="h200_sxm")
    ops = {op.name: op for op in a.forms.model.ops}

    def blocks(name: str, B: int) -> float:
        point = {sym(i.name): i.value for i in a.inputs({"B": B})}
        return float(default_blocks(ops[name]).xreplace(point))
    # q: [B*T, 4096] in 128x128 tiles: ceil(1/128) * 4096/128 = 1 * 32 = 32 at B=1
    assert blocks("q", 1) == 32
    assert blocks("q", 256) == 2 * 32                # ceil(256/128) = 2
    assert blocks("k", 1) == 8                       # 8 kv heads x 128 = 1024 wide: 8 tiles
    assert blocks("a", 4) == 4 * 32                  # decode attention: B x heads
    assert blocks("h", 4) == 4                       # rmsnorm: one block per token row


def test_blocks_override_in_the_spec(tmp_path: Path) -> None:
    spec = tmp_path / "m.arch"
    spec.write_text("model m {\n  hidden = 4096\n  x = embed(tokens, 100 -> hidden)\n"
                    "  y = linear(x, hidden -> hidden, blocks = 2 * B)\n}\n")
    a = analyze(spec, hw="h200_sxm")
    d = diagnose(a, {}, Measured(step_s=1e-3), 132)
    occ = {o["name"]: o for o in d["occupancy"]["ops"]}
    assert occ["y"]["blocks"] == 2                   # 2 * B at B = 1
    assert occ["y"]["fraction"] == pytest.approx(2 / 132)


def _diagnose_json(capsys, *args: str) -> dict:
    assert main(["diagnose", LLAMA, "--hw", "h200_sxm", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_contract_and_measured_counts_replace_the_model(capsys) -> None:
    d = _diagnose_json(capsys, "--measured-step", "281.6ms", "--kernels", "2790",
                       "--collectives", "92", "--collective-time", "58.7us",
                       "--speedup", "8=2.44", "--speedup", "8=1.10x")
    assert CONTRACT <= d.keys()
    assert d["measured"]["step_s"] == pytest.approx(0.2816)
    assert d["measured"]["tokens_per_s"] == pytest.approx(1 / 0.2816)   # B*T = 1 token
    assert d["launch"]["kernels"] == 2790 and d["comm"]["calls"] == 92
    assert d["comm"]["share"] == pytest.approx(0.01918, rel=1e-3)
    assert [round(a["serial_fraction"], 2) for a in d["amdahl"]] == [0.33, 0.90]
    assert d["binding"] in {"bandwidth", "comm", "launch", "occupancy"}
    assert d["faster_than_bound"] is False
    assert {"change", "expected_step_s"} <= d["prediction"].keys()


def test_launch_bound_run_predicts_fusion_from_the_model(capsys) -> None:
    d = _diagnose_json(capsys, "--measured-step", "16.6ms", "--kernels", "2790")
    assert d["binding"] == "launch"
    # Llama's layer: 2 rmsnorm, q, k, v, attention, o, 2 add, g, u, silu_mul, d = 13 kernels
    assert "fuse to 13 kernels per layer" in d["prediction"]["change"]
    model_kernels = 32 * 13 + 3                       # + embed, final rmsnorm, lm head = 419
    saved = (2790 - model_kernels) * 4e-6             # each launch removed saves 4 us
    assert d["prediction"]["expected_step_s"] == pytest.approx(16.6e-3 - saved)


def test_tokens_per_s_converts_to_a_step(capsys) -> None:
    # B=4, T=1: 4 tokens per step; 200 tok/s -> 20 ms per step
    d = _diagnose_json(capsys, "--measured-tokens-per-s", "200", "--set", "B=4")
    assert d["measured"]["step_s"] == pytest.approx(0.02)


def test_faster_than_the_bound_is_flagged(capsys) -> None:
    roof = analyze(LLAMA, hw="h200_sxm").evaluate({})["step"]["overlap_floor_s"]
    fast = _diagnose_json(capsys, "--measured-step", f"{roof / 2}s")
    assert fast["faster_than_bound"] is True
    assert fast["bound_check"]["ratio"] == pytest.approx(0.5)
    assert fast["bound_check"]["evidence"]                 # op-level numbers to look at
    ok = _diagnose_json(capsys, "--measured-step", f"{roof * 1.01}s")
    assert ok["faster_than_bound"] is False


def test_faster_than_bound_is_loud_in_text(capsys) -> None:
    assert main(["diagnose", LLAMA, "--hw", "h200_sxm", "--measured-step", "1ms"]) == 0
    assert "MEASURED STEP IS FASTER THAN THE BOUND" in capsys.readouterr().out


def test_nsys_per_target_and_idle_gap(capsys) -> None:
    d = _diagnose_json(capsys, "--measured-step", "6ms", "--nsys", str(FIX / "llama_decode.csv"),
                       "--steps", "10")
    k = d["kernels"]
    rows = {r["target"]: r for r in k["targets"]}
    # linear: (42,000,000 + 4,000,000) ns / 10 steps = 4.6 ms per step, 2250 / 10 = 225 launches
    assert rows["linear"]["measured_s"] == pytest.approx(4.6e-3)
    assert rows["linear"]["launches_per_step"] == 225
    assert rows["linear"]["ratio"] == pytest.approx(4.6e-3 / rows["linear"]["bound_s"])
    # every kernel: 55,060,000 ns / 10 = 5.506 ms of 6 ms: idle 1 - 5.506/6 = 0.0823
    assert k["kernel_time_s"] == pytest.approx(5.506e-3)
    assert k["idle_share"] == pytest.approx(0.08233, rel=1e-3)
    assert k["kernels_per_step"] == 420                  # 4200 launches / 10
    assert d["launch"]["kernels"] == 420                 # measured kernels replace the model's
    assert "rope" in k["not_in_model"]                   # this spec has no rope op
    # unmatched, largest first: indexSelect 40,000 ns / 10 = 4 us, argmax 30,000 / 10 = 3 us
    assert [u["name"][:40] for u in k["unmatched"]] == [
        "void at::native::(anonymous namespace)::", "void at::native::reduce_kernel<(int)512,"]
    assert [u["time_s"] for u in k["unmatched"]] == pytest.approx([4e-6, 3e-6])


def test_nsys_with_mapping_file(capsys) -> None:
    d = _diagnose_json(capsys, "--measured-step", "6ms", "--nsys", str(FIX / "llama_decode.csv"),
                       "--steps", "10", "--map", str(FIX / "llama.map"))
    assert d["kernels"]["unmatched"] == []                # embed mapped, argmax ignored
    rows = {r["target"]: r for r in d["kernels"]["targets"]}
    assert rows["q"]["measured_s"] == pytest.approx(128e-6)  # 1,280,000 ns / 10


def test_depth_finds_where_the_measurement_falls_away(capsys, tmp_path: Path) -> None:
    plot, out = tmp_path / "depth.png", tmp_path / "DIAGNOSIS.md"
    bound = {n: analyze(LLAMA, hw="h200_sxm").evaluate({"N": n})["step"]["tokens_per_s"]
             for n in (1024, 32768, 131071)}
    # measured at 90%, 85% and 50% of the bound: 0.5 < 0.8 * 0.9 = 0.72 first at 131071
    # (N + T = 131072, the trained context)
    args = ["--depth", f"1k={0.9 * bound[1024]}", "--depth", f"32k={0.85 * bound[32768]}",
            "--depth", f"131071={0.5 * bound[131071]}"]
    d = _diagnose_json(capsys, "--measured-step", "10ms", *args, "--plot", str(plot),
                       "--out", str(out))
    assert d["depth"]["diverges_at"] == 131071
    assert [round(p["ratio"], 2) for p in d["depth"]["points"]] == [0.9, 0.85, 0.5]
    assert plot.stat().st_size > 10_000
    text = out.read_text()
    assert "**Binding ceiling:" in text and "## What would prove this wrong" in text
    assert "diverges from N = 131071" in text


@pytest.mark.parametrize("args, message", [
    (["--measured-step", "5GB"], "--measured-step '5GB': expected a time, got bytes"),
    (["--measured-step", "0ms"], "--measured-step: the time must be positive"),
    (["--measured-step", "50"], "--measured-step 50: a time needs a unit"),
    (["--measured-step", "1ms", "--collective-time", "20"], "20ms or 20s?"),
    (["--measured-step", "1ms", "--kernels", "2.5"], "--kernels: expected a whole number"),
    (["--measured-step", "1ms", "--kernels", "1e12"], "over MAX_COUNT"),
    (["--measured-step", "1ms", "--speedup", "8=9"], "a speedup must lie between 1 and the GPU count"),
    (["--measured-step", "1ms", "--speedup", "1=1"], "Amdahl needs 2 or more GPUs"),
    (["--measured-step", "1ms", "--speedup", "8"], "expected A=B"),
    (["--measured-step", "1ms", "--nsys", "x.csv"], "--nsys and --steps go together"),
    (["--measured-step", "1ms", "--plot", "x.png"], "--plot draws the --depth points"),
    (["--measured-step", "1ms", "--nsys", str(FIX / "empty.csv"), "--steps", "1"], "empty.csv:1:1: error"),
])
def test_bad_arguments_exit_1_with_a_message(capsys, args: list[str], message: str) -> None:
    assert main(["diagnose", LLAMA, "--hw", "h200_sxm", *args]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_too_many_points_names_the_limit(capsys) -> None:
    args = [a for _ in range(33) for a in ("--speedup", "8=2")]
    assert main(["diagnose", LLAMA, "--hw", "h200_sxm", "--measured-step", "1ms", *args]) == 1
    assert "MAX_SPEEDUP_POINTS (32)" in capsys.readouterr().err


def test_measurement_is_required(capsys) -> None:
    with pytest.raises(SystemExit) as info:  # argparse's error path exits 1 (the contract)
        main(["diagnose", LLAMA, "--hw", "h200_sxm"])
    assert info.value.code == 1
    assert "--measured-step" in capsys.readouterr().err


# ---- issue #22: the seed case study, candidates bounded by the measurement -------------

QWEN = str(ROOT / "specs" / "models" / "qwen3_30b_a3b.arch")
SEED = ["--set", "B=1", "--set", "N=4096", "--kernels", "2790", "--collectives", "92",
        "--collective-time", "58.7us", "--json"]
THREE = [(QWEN, "gh200", []), (str(ROOT / "specs" / "models" / "llama3_1_70b.arch"), "h200_sxm",
                               ["--set", "tp=8"]),
         (str(ROOT / "specs" / "models" / "deepseek_v3.arch"), "gh200", ["--set", "tp=8"])]


def _seed(capsys, spec: str, hw: str, extra: list[str], step: str) -> dict:
    assert main(["diagnose", spec, "--hw", hw, "--measured-step", step, *SEED, *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("spec, hw, extra", THREE, ids=["qwen3-gh200", "llama70b-tp8", "dsv3-tp8"])
def test_seed_at_16_6_ms_is_launch_bound_and_nothing_outlasts_the_step(capsys, spec, hw, extra) -> None:
    d = _seed(capsys, spec, hw, extra, "16.6ms")
    # 16.6 ms / 2790 kernels = 5.95 us each, 4 us of it launch overhead:
    # 2790 x 4 us = 11.16 ms = 67.2% of the step; 92 x 58.7 us = 5.4004 ms = 32.5%
    assert d["binding"] == "launch" and not d["by_elimination"]
    assert d["launch"]["share"] == pytest.approx(11.16 / 16.6, rel=1e-9)
    assert d["comm"]["share"] == pytest.approx(5.4004 / 16.6, rel=1e-9)
    assert [r["candidate"] for r in d["ranking"]][:2] == ["launch", "comm"]
    for name in ("bandwidth", "comm", "launch", "occupancy"):
        assert 0 <= d[name]["share"] <= 1, name            # no share over 100%
        assert d[name]["ruled_out"] or d[name]["time_s"] <= 16.6e-3
    kinds = {o["kind"] for o in d["occupancy"]["ops"]}
    assert not kinds & {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}


def test_seed_at_281_6_ms_the_kernels_are_slow(capsys) -> None:
    d = _seed(capsys, QWEN, "gh200", [], "281.6ms")
    # 281.6 ms / 2790 = 100.9 us per kernel; launch 11.16 / 281.6 = 3.96%; comm 5.4004 /
    # 281.6 = 1.92%: no candidate fires, the kernels themselves are slow
    assert d["launch"]["time_per_kernel_s"] == pytest.approx(100.9e-6, rel=1e-3)
    assert d["launch"]["share"] == pytest.approx(0.0396, abs=5e-4)
    assert d["comm"]["share"] == pytest.approx(0.0192, abs=5e-4)
    assert d["binding"] == "occupancy" and d["by_elimination"]
    assert main(["diagnose", QWEN, "--hw", "gh200", "--measured-step", "281.6ms", *SEED[:-1]]) == 0
    text = capsys.readouterr().out
    assert "the kernels themselves are slow: 2790 kernels at ~101 us each (launch 4%" in text
    assert "collectives 2%" in text


def test_a_candidate_that_outlasts_the_step_is_ruled_out(capsys) -> None:
    # Qwen3-30B-A3B at B=1 on gh200: the six hot ops under 25% of the SMs, each at its
    # hard time / the fraction of the SMs it fills, take longer than a 16.6 ms step
    # together (the "+67.3 ms, 405% of the step" was such a claim): ruled out.
    d = _seed(capsys, QWEN, "gh200", [], "16.6ms")
    occ = d["occupancy"]
    assert occ["ruled_out"] and occ["share"] == 0 and occ["time_s"] > 16.6e-3
    assert d["ranking"][-1] == {"candidate": "occupancy", "time_s": occ["time_s"],
                                "share": 0.0, "ruled_out": True}
    # 2790 launches x 4 us = 11.16 ms: under 10 ms of step, launches alone are ruled out
    d = _seed(capsys, QWEN, "gh200", [], "10ms")
    assert d["launch"]["ruled_out"] and not d["launch"]["fires"] and d["binding"] != "launch"


def test_occupancy_scales_the_hard_time_not_the_launch_floor(tmp_path: Path) -> None:
    # y: 2 blocks of 132 SMs; at B=1 its bytes are 4096 x 4096 x 2 + 2 x 4096 x 2 =
    # 33,570,816 B -> 33,570,816 / 4.8e12 = 6.994 us on h200_sxm (over the 4 us launch)
    spec = tmp_path / "m.arch"
    spec.write_text("model m {\n  hidden = 4096\n  x = embed(tokens, 100 -> hidden)\n"
                    "  y = linear(x, hidden -> hidden, blocks = 2 * B)\n}\n")
    d = diagnose(analyze(spec, hw="h200_sxm"), {}, Measured(step_s=1.0), 132)
    y = next(o for o in d["occupancy"]["ops"] if o["name"] == "y")
    # at 2/132 of the SMs: 6.994 us x 66 = 461.6 us
    assert y["occupied_s"] == pytest.approx(33_570_816 / 4.8e12 * 66, rel=1e-9)


def test_between_the_overlap_floor_and_the_roofline_is_legitimate() -> None:
    r = _result()
    r["step"].update(overlap_floor_s=0.5e-3)           # floor 0.5 ms, roofline 1 ms
    from infest.compiler.analyses.diagnose import faster_than_bound
    chk = faster_than_bound(r, 0.8e-3, None)            # an overlapping engine: 0.8 ms
    assert not chk["flag"] and chk["below_roofline"]
    assert chk["ratio"] == pytest.approx(0.8 / 0.5)
    assert faster_than_bound(r, 0.4e-3, None)["flag"]  # under the floor: impossible
