"""Several GPUs: layouts, per-GPU memory and collectives counted from the graph.

Every expected number is derived by hand in the comments from the published configs
(the shipped specs' dimensions) and the shipped hardware's link numbers.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.dsl.errors import SpecError
from infest.exports.cli.main import main

MODELS = Path(__file__).parents[1] / "specs" / "models"
LLAMA8, LLAMA70 = MODELS / "llama3_1_8b.arch", MODELS / "llama3_1_70b.arch"
QWEN, DEEPSEEK = MODELS / "qwen3_30b_a3b.arch", MODELS / "deepseek_v3.arch"


def _calls(result: dict, kind: str, group: str | None = None) -> int:
    return sum(o["count"] for o in result["ops"]
               if o["kind"] == kind and (group is None or o["group"] == group))


def test_llama_8b_tp2_reduces_twice_per_layer_and_halves_its_shards() -> None:
    r = analyze(LLAMA8, hw="h100_sxm").evaluate({"tp": 2})
    # Megatron: after the attention output projection and after the MLP down projection,
    # 2 x 32 layers = 64 all-reduces of B*T x 4096 bf16 = 1 x 4096 x 2 = 8192 bytes each.
    layers = [o for o in r["ops"] if o["kind"] == "all_reduce" and o["group"] != "embedding"]
    assert sum(o["count"] for o in layers) == 64
    assert {o["bytes"] for o in layers} == {8192}
    # The vocab-parallel embedding sums its partial lookups once (vLLM's
    # VocabParallelEmbedding), and the split logits are gathered: 128256 x 2 bytes.
    assert _calls(r, "all_reduce", "embedding") == 1
    assert [o["bytes"] for o in r["ops"] if o["kind"] == "all_gather"] == [128256 * 2]
    assert r["step"]["collectives"] == 66
    m = r["memory"]
    # Weights 2 x 8,030,261,248 bytes; the 32 x 2 + 1 norm vectors of 4096 (266,240
    # params, 532,480 bytes) stay whole on both GPUs, the rest is halved.
    assert m["weights_bytes_per_gpu"] == (2 * 8_030_261_248 - 532_480) / 2 + 532_480
    # 8 KV heads over 2 GPUs: 4 each, half of 131,072 bytes per token, N + T = 4097 tokens.
    assert m["kv_bytes_per_gpu"] == 131_072 / 2 * 4097
    assert r["parallel"] == {"tp": 2, "ep": 1, "pp": 1, "dp": 1, "gpus": 2, "policy": "full",
                             "policy_derived": False}


def test_llama_8b_tp2_comm_time_is_alpha_beta_over_nvlink() -> None:
    r = analyze(LLAMA8, hw="h100_sxm").evaluate({"tp": 2})
    # All-reduce over 2 GPUs: 2 us + 2(2-1)/2 x 8192 B / 450 GB/s; 65 calls.
    # All-gather of the logits: 2 us + (2-1)/2 x 256512 B / 450 GB/s; 1 call.
    ar = 2e-6 + 1.0 * 8192 / 450e9
    ag = 2e-6 + 0.5 * 256_512 / 450e9
    assert r["step"]["t_comm_s"] == pytest.approx(65 * ar + ag, rel=1e-12)


def test_llama_8b_tp8_all_reduce_moves_its_buffer_once_under_nvlink_sharp() -> None:
    a = analyze(LLAMA8, hw="h100_sxm")     # nvls = 1: third-generation NVSwitch
    sharp, ring = (a.evaluate({"tp": 8, **x})["step"]["t_comm_s"] for x in ({}, {"nvls": 0}))
    # All-reduce over 8 GPUs: 2 us + 1 x 8192 B / 450 GB/s with the switch summing, a
    # ring's 2 us + 2(8-1)/8 x 8192 B / 450 GB/s without; 65 calls either way.
    # The logits' all-gather moves 7/8 x 256512 B either way: 2 us + 7/8 x 256512 / 450 GB/s.
    ag = 2e-6 + 7 / 8 * 256_512 / 450e9
    assert sharp == pytest.approx(65 * (2e-6 + 1.0 * 8192 / 450e9) + ag, rel=1e-12)
    assert ring == pytest.approx(65 * (2e-6 + 1.75 * 8192 / 450e9) + ag, rel=1e-12)


def test_kv_heads_stop_splitting_at_tp_equal_kv_heads() -> None:
    a = analyze(LLAMA8, hw="h100_sxm")
    kv8, kv16 = (a.evaluate({"tp": t, "B": 16})["memory"]["kv_bytes_per_gpu"] for t in (8, 16))
    # 8 KV heads: at tp=8 one head per GPU; at tp=16 each head is held by 2 GPUs.
    assert kv16 == kv8 == 16 * 4097 * 131_072 / 8


def test_llama_70b_tp8_pp2_memory_per_gpu_and_stage_hand_off() -> None:
    r = analyze(LLAMA70, hw="h100_sxm").evaluate({"tp": 8, "pp": 2})
    # Params: 2 x 128256 x 8192 (embedding, head) + 80 x (2 x 8192 x 8192 (q, o)
    # + 2 x 8192 x 1024 (k, v) + 3 x 8192 x 28672 (MLP) + 2 x 8192 (norms)) + 8192.
    params = 2 * 128256 * 8192 + 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672
                                       + 2 * 8192) + 8192
    norms = (80 * 2 + 1) * 8192
    assert r["params"]["total"] == params == 70_553_706_496
    # Each GPU holds 1/8 of the split weights of one of 2 stages, the norms whole.
    per_gpu = (2 * (params - norms) / 8 + 2 * norms) / 2
    assert r["memory"]["weights_bytes_per_gpu"] == pytest.approx(per_gpu, rel=1e-12)
    # KV: 80 x 2 x 8 x 128 x 2 = 327,680 bytes per token; 8 KV heads over 8, 2 stages.
    assert r["memory"]["kv_bytes_per_gpu"] == pytest.approx(327_680 / 8 / 2 * 4097, rel=1e-12)
    hand_off = [o for o in r["ops"] if o["kind"] == "send_recv"]
    # pp - 1 = 1 hand-off of the residual stream, 1 x 8192 x 2 bytes; tp x pp = 16 GPUs
    # span 2 nodes of 8, so it crosses the 50 GB/s network: 10 us + 16384 / 50e9.
    assert [(o["count"], o["bytes"]) for o in hand_off] == [(1, 16_384)]
    assert hand_off[0]["time_s"] == pytest.approx(10e-6 + 16_384 / 50e9, rel=1e-12)
    assert r["parallel"]["gpus"] == 16


def test_a_tp_group_spanning_two_nodes_uses_the_network() -> None:
    r = analyze(LLAMA8, hw="h100_sxm").evaluate({"tp": 16, "B": 16})
    # 16 GPUs > 8 per node: 10 us + 2(15/16) x (16 x 4096 x 2) B / 50 GB/s per all-reduce.
    ar = [o for o in r["ops"] if o["kind"] == "all_reduce"][0]
    assert ar["time_s"] == pytest.approx(10e-6 + 2 * 15 / 16 * 131_072 / 50e9, rel=1e-12)


def test_qwen3_expert_parallel_dispatch_and_combine_bytes_from_top_k() -> None:
    # Attention data parallel over 8 replicas, experts over ep = 8 (policy full): the
    # expert layer spans the 8 GPUs; each GPU sends its B / 8 = 8 tokens x top_k 8 copies
    # x hidden 2048 x 2 bytes = 262,144 bytes per dispatch, and the same back (combine).
    r = analyze(QWEN, hw="h200_sxm").evaluate({"ep": 8, "dp": 8, "B": 64})
    a2a = [o for o in r["ops"] if o["kind"] == "all_to_all"]
    assert [(o["name"], o["count"], o["bytes"]) for o in a2a] == [
        ("g.dispatch", 48, 262_144), ("m.combine", 48, 262_144)]
    # tp = 1: attention is not split, so nothing else communicates.
    assert r["step"]["collectives"] == 96
    # all-to-all over 8 in one node: 2 us + 7/8 x 262144 / 450 GB/s = 2.51 us per call,
    # under the H200's 4 us launch floor for its one kernel, which its time_s takes.
    assert a2a[0]["t_comm_s"] == pytest.approx(2e-6 + 7 / 8 * 262_144 / 450e9, rel=1e-12)
    assert a2a[0]["time_s"] == pytest.approx(4e-6, rel=1e-12)


def test_qwen3_experts_only_reduces_once_per_moe_layer() -> None:
    r = analyze(QWEN, hw="h200_sxm", policy="experts_only").evaluate({"tp": 4, "ep": 4})
    # Tokens replicated: each GPU computes its 128 / 4 experts for the token and one
    # all-reduce of 1 x 2048 x 2 bytes per layer sums the partial outputs: 48 calls.
    assert [(o["kind"], o["count"], o["bytes"]) for o in r["ops"]
            if o["kind"] in ("all_reduce", "all_gather", "all_to_all")] == [
        ("all_reduce", 48, 4096)]


def test_qwen3_tp8_without_expert_parallelism_has_no_all_to_all() -> None:
    # ep = 1 under policy full (`by all_to_all`): no expert parallelism, as vLLM runs it
    # without --enable-expert-parallel: every expert split 8 ways, tokens replicated, one
    # all-reduce per MoE layer. 48 attention + 48 MoE all-reduces + 1 embedding = 97, each
    # B*T x hidden x 2 bytes = 8 x 2048 x 2 = 32,768; the logits gathered once.
    r = analyze(QWEN, hw="h200_sxm").evaluate({"tp": 8, "ep": 1, "B": 8})
    assert _calls(r, "all_to_all") == 0
    assert _calls(r, "all_reduce") == 48 + 48 + 1
    assert {o["bytes"] for o in r["ops"] if o["kind"] == "all_reduce"} == {32_768}
    assert _calls(r, "all_gather") == 1 and r["step"]["collectives"] == 98
    # ep = 8: dispatch and combine over the 8 GPUs and a token all-gather per MoE layer
    # replace the MoE all-reduce: 49 all-reduces, 96 all-to-alls, 48 + 1 all-gathers.
    r8 = analyze(QWEN, hw="h200_sxm").evaluate({"tp": 8, "ep": 8, "B": 8})
    assert (_calls(r8, "all_reduce"), _calls(r8, "all_to_all"), _calls(r8, "all_gather")) == (
        49, 96, 49)


def test_deepseek_experts_only_communicates_in_moe_layers_only() -> None:
    r = analyze(DEEPSEEK, hw="h200_sxm", policy="experts_only").evaluate({"tp": 8, "ep": 8})
    # 61 layers, the first 3 dense: one all-reduce per MoE layer, none for dense ones.
    assert r["step"]["collectives"] == 61 - 3 == _calls(r, "all_reduce")


def test_deepseek_full_counts_every_collective_from_the_graph() -> None:
    r = analyze(DEEPSEEK, hw="h200_sxm").evaluate({"tp": 8, "ep": 8, "B": 8})
    # all-reduce: the attention output projection of 61 layers, the down projection of the
    # 3 dense MLPs, the shared expert of 58 MoE layers, the vocab-parallel embedding.
    assert _calls(r, "all_reduce") == 61 + 3 + 58 + 1
    # all-to-all: dispatch and combine in each MoE layer; all-gather: the tokens after
    # each combine, and the logits once.
    assert _calls(r, "all_to_all") == 2 * 58
    assert _calls(r, "all_gather") == 58 + 1


def test_deepseek_tp8_without_ep_reduces_routed_and_shared_experts_once() -> None:
    r = analyze(DEEPSEEK, hw="h200_sxm").evaluate({"tp": 8, "ep": 1, "B": 8})
    # ep = 1: every expert split 8 ways, so the routed experts' output is a partial sum, as
    # the shared expert's is. Engines add the two and all-reduce once (vLLM and SGLang's
    # DeepseekV2MoE: the shared expert with reduce_results=False). all-reduce: the
    # attention output of 61 layers, the 3 dense MLPs, the 58 MoE layers (routed + shared
    # in one), the embedding = 61 + 3 + 58 + 1 = 123 (not 181 = 123 + 58 twice-reduced).
    assert _calls(r, "all_reduce") == 61 + 3 + 58 + 1
    assert _calls(r, "all_to_all") == 0 and _calls(r, "all_gather") == 1  # the logits
    # Each call moves the residual stream: B x T x hidden bf16 = 8 x 1 x 7168 x 2 bytes.
    assert {o["comm_bytes"] for o in r["ops"] if o["kind"] == "all_reduce"} == {8 * 7168 * 2}


PARALLEL_BLOCK = """
# Falcon-style parallel attention and MLP reading one norm: x + attn(h) + mlp(h).
model parallel_block {
  hidden = 256; ffn = 1024; vocab = 64; layers = 2
  policy full { split embedding, attention, mlp over tp }
  x = embed(tokens, vocab -> hidden)                  group embedding
  repeat layers {
    h = rmsnorm(x)                                    group norm
    o = linear(linear(h, hidden -> hidden), hidden -> hidden) group attention
    x = add(x, o)
    d = linear(linear(h, hidden -> ffn), ffn -> hidden) group mlp
    x = add(x, d)
  }
}
"""


def test_parallel_attention_and_mlp_reduce_once_a_layer(tmp_path: Path) -> None:
    spec = tmp_path / "parallel_block.arch"
    spec.write_text(PARALLEL_BLOCK)
    r = analyze(spec, hw="h100_sxm").evaluate({"tp": 2})
    # o and d are row-parallel (each after a column-parallel linear): two partial sums
    # added into a residual that stays a partial sum until the next norm reads it, so
    # one all-reduce a layer (Falcon's parallel_attn in vLLM), plus the vocab-parallel
    # embedding's: 1 + 2 x 1 = 3. Each moves B x T x hidden bf16 = 1 x 1 x 256 x 2 = 512.
    reduces = [(o["name"], o["count"], o["comm_bytes"]) for o in r["ops"]
               if o["kind"] == "all_reduce"]
    assert reduces == [("x.all_reduce", 1, 512), ("x#3.all_reduce", 2, 512)]
    assert r["step"]["collectives"] == 3


BIG = """
# A 1T-parameter dense model in bf16 (the capacity check in docs/physics.md): 270 layers of two linears,
# 21504 -> 86016 -> 21504 (21504 = 21 x 1024 so that 21 GPUs split it evenly).
model big {
  hidden = 21504; ffn = 86016; layers = 270
  policy full { split mlp over tp }
  x = embed(tokens, 21 -> hidden)                     group embedding
  repeat layers {
    u = linear(x, hidden -> ffn)                      group mlp
    x = linear(u, ffn -> hidden)
  }
}
"""


def test_a_1t_dense_model_needs_20_gh200s_and_reads_its_weights_in_24_ms_on_21(tmp_path: Path) -> None:
    spec = tmp_path / "big.arch"
    spec.write_text(BIG)
    a = analyze(spec, hw="gh200")
    params = 270 * 2 * 21504 * 86016           # 998,831,554,560 ~ 1T
    assert a.evaluate({})["params"]["total"] == params + 21 * 21504
    # 2 bytes each: 1.998 TB / (97,871 MiB = 102.6 GB) = 19.47 -> 20 GPUs just to hold
    # the weights.
    from infest.compiler.analyses.capacity import capacity
    assert capacity(a, {})["gpus_to_hold_weights"] == 20 == math.ceil(2 * params / (97871 * 2**20))
    # tp must divide 21,504 (20 does not): each of 21 GPUs reads its 1/21 of the weights per token at 4.0 TB/s: ~23.8 ms.
    floor = a.evaluate({"tp": 21})["step"]["weights_floor_s"]
    assert floor == pytest.approx(2 * params / 21 / 4.0e12, rel=1e-12)
    assert floor == pytest.approx(0.0238, abs=0.0001)


@pytest.mark.parametrize("sets,message", [
    ({"tp": 3}, "tp divides"),                    # 32 heads, 4096 columns: not by 3
    ({"ep": 3}, "ep divides the experts"),        # 128 experts
    ({"pp": 49}, "pp <= the model's layers"),     # 48 layers
    ({"dp": 2}, "dp divides the batch B"),        # B = 1
])
def test_bad_layouts_are_located_errors(sets: dict, message: str) -> None:
    with pytest.raises(SpecError) as info:
        analyze(QWEN, hw="h200_sxm").evaluate(sets)
    assert message in str(info.value)


def test_missing_links_refuse_a_layout_but_not_one_gpu(tmp_path: Path, capsys) -> None:
    hw = tmp_path / "bare.arch"
    hw.write_text('hardware bare { mem_capacity = 80 GB; mem_bw = 3 TB/s\n'
                  '  flops_bf16 = 900 TFLOP/s; launch_overhead = 4 us }\n')
    assert main(["eval", str(LLAMA8), "--hw", str(hw)]) == 0
    capsys.readouterr()
    assert main(["eval", str(LLAMA8), "--hw", str(hw), "--set", "tp=2"]) == 1
    err = capsys.readouterr().err
    assert "needs links" in err and "link_bw" in err and "Traceback" not in err


def test_one_gpu_has_no_collectives_and_unchanged_numbers() -> None:
    r = analyze(LLAMA8, hw="h100_sxm").evaluate({})
    assert r["step"]["collectives"] == 0 and r["step"]["t_comm_s"] == 0
    assert not [o for o in r["ops"] if o["kind"] in ("all_reduce", "all_gather", "send_recv")]
    # Per-GPU memory is the whole model's on one GPU.
    assert r["memory"]["total_bytes_per_gpu"] == r["memory"]["total_bytes"]


def test_unknown_policy_and_bad_split_are_located(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="declares no such policy"):
        analyze(LLAMA8, hw="h100_sxm", policy="fulll")
    spec = tmp_path / "m.arch"
    spec.write_text("model m {\n  hidden = 64\n  policy p { split atention over tp }\n"
                    "  x = embed(tokens, 10 -> hidden) group attention\n}\n")
    with pytest.raises(SpecError) as info:
        analyze(spec)
    assert f"{spec}:3:14: error: no op is in group 'atention'" in str(info.value)


def test_sweep_over_tp_equals_eval(capsys) -> None:
    assert main(["sweep", str(LLAMA70), "--hw", "h100_sxm", "--B", "1,8", "--N", "4k",
                 "--over", "tp=2,4,8", "--metric", "time_s", "--csv"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert rows[0] == "tp,B,N,time_s,fits" and len(rows) == 1 + 3 * 2
    a = analyze(LLAMA70, hw="h100_sxm")
    for row in rows[1:]:
        tp, b, n, t, _ = row.split(",")
        want = a.evaluate({"tp": int(tp), "B": int(b), "N": int(n)})["step"]["time_s"]
        assert float(t) == want


def test_imported_specs_declare_the_shipped_policies(tmp_path: Path) -> None:
    out = tmp_path / "qwen.arch"
    config = Path(__file__).parent / "fixtures" / "hf" / "Qwen--Qwen3-30B-A3B.config.json"
    assert main(["import-hf", str(config), "-o", str(out)]) == 0
    a = analyze(out, hw="h200_sxm", policy="experts_only")
    assert set(a.model.policies) == {"full", "experts_only"}
    # As the shipped spec: one all-reduce of 1 x 2048 x 2 bytes per MoE layer (48).
    r = a.evaluate({"tp": 4, "ep": 4})
    assert [(o["kind"], o["count"], o["bytes"]) for o in r["ops"] if o["kind"] != "linear"
            and o["kind"].startswith("all")] == [("all_reduce", 48, 4096)]


def test_a_spec_without_a_policy_gets_full_from_its_group_names(tmp_path: Path, capsys) -> None:
    # Llama 3.1 8B with its policy line removed: the derived `full` splits embedding,
    # attention, mlp and lm_head over tp exactly as the shipped policy does.
    spec = tmp_path / "llama.arch"
    spec.write_text("\n".join(line for line in LLAMA8.read_text().splitlines()
                              if "policy" not in line))
    r = analyze(spec, hw="h100_sxm").evaluate({"tp": 2})
    # Weights halved but for the 65 norm vectors (532,480 bytes, as above); 64 layer
    # all-reduces + 1 embedding all-reduce + 1 logits all-gather = 66 collectives.
    assert r["memory"]["weights_bytes_per_gpu"] == (2 * 8_030_261_248 - 532_480) / 2 + 532_480
    assert r["step"]["collectives"] == 66
    assert r["parallel"]["policy"] == "full" and r["parallel"]["policy_derived"] is True
    assert main(["eval", str(spec), "--hw", "h100_sxm", "--set", "tp=2"]) == 0
    assert "policy full (derived from group names)" in capsys.readouterr().out


def test_no_policy_and_an_unknown_weight_group_refuses_tp(tmp_path: Path) -> None:
    spec = tmp_path / "m.arch"
    spec.write_text("""model m {
  hidden = 1024
  x = embed(tokens, 1000 -> hidden)  group embedding
  u = linear(x, hidden -> 4096)      group ffn
  y = linear(u, 4096 -> hidden)
}
""")
    a = analyze(spec, hw="h100_sxm")
    assert a.evaluate({})["step"]["collectives"] == 0  # one GPU: nothing to place
    with pytest.raises(SpecError) as err:
        a.evaluate({"tp": 2})
    text = str(err.value)
    # Located at the group's first weight-bearing op, naming the missing policy block.
    assert "m.arch:4:" in text and "group 'ffn'" in text and "policy" in text
