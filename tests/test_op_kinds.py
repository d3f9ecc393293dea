"""Recurrent-state mixers, sparse attention with its indexer, soft-capping and per-tensor
weight formats, each on a tiny spec whose numbers are derived by hand in the comments."""
from __future__ import annotations

from pathlib import Path

import pytest

from infest.compiler.api import analyze
from infest.dsl.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
HW = """
hardware hw { mem_capacity = 1 GB; mem_bw = 1 TB/s; launch_overhead = 2 us
  flops_bf16 = 100 TFLOP/s; flops_fp8 = 200 TFLOP/s; flops_fp32 = 50 TFLOP/s
  link_bw = 450 GB/s; link_latency = 5 us; gpus_per_node = 8 }
"""
# A Qwen3-Next-style Gated DeltaNet layer (Qwen/Qwen3-Next-80B-A3B-Instruct config.json:
# hidden_size 2048, linear_num_key_heads 16, linear_num_value_heads 32,
# linear_key_head_dim 128, linear_value_head_dim 128, linear_conv_kernel_dim 4), its
# recurrent state kept in fp32 as vLLM keeps it.
GDN = """
  hidden = 2048; kh = 16; vh = 32; dk = 128; dv = 128
  x = embed(tokens, 1000 -> hidden)
  q = linear(x, hidden -> kh * dk)
  k = linear(x, hidden -> kh * dk)
  v = linear(x, hidden -> vh * dv)
  a = linear_attention(q, k, v, vh, kh, dk, dv, delta=1, kv=fp32)
"""


def analysis(tmp_path: Path, body: str, phase: str = "decode"):
    path = tmp_path / "m.arch"
    path.write_text(HW + "model m {\n" + body + "\n}\n")
    return analyze(path, hw="hw", phase=phase)


def op(result: dict, name: str) -> dict:
    return next(o for o in result["ops"] if o["name"] == name)


def test_gated_deltanet_decode_state_and_flops(tmp_path: Path) -> None:
    r = analysis(tmp_path, GDN).evaluate({"B": 8, "N": 4096})
    a = op(r, "a")
    # state per sequence: 32 heads x 128 x 128 = 524,288 fp32 values = 2,097,152 bytes,
    # read and written once per step for each of 8 sequences: 2 x 8 x 2,097,152.
    assert a["kv_bytes"] == 33_554_432
    # per token and head: decay 1 + k v^T 2 + readout 2 + delta-rule k^T S 2 = 7 x 128 x 128
    # = 114,688; no intra-chunk term at T = 1: 8 x 32 x 114,688.
    assert a["flops"] == 29_360_128
    # q and k in (2 x 16 x 128), v in and the output (2 x 32 x 128), bf16, 8 tokens.
    assert a["act_bytes"] == 8 * (4096 + 8192) * 2 == 196_608
    assert a["weight_bytes"] == 0


def test_recurrent_state_is_constant_in_the_context(tmp_path: Path) -> None:
    a = analysis(tmp_path, GDN)
    short, long = (a.evaluate({"B": 8, "N": n})["memory"] for n in (4096, 1_000_000))
    # 8 sequences x 2,097,152 bytes, whatever N; no bytes per cached token.
    assert short["kv_bytes"] == long["kv_bytes"] == 16_777_216
    assert short["kv_bytes_per_token"] == 0
    # weights: embed 1000 x 2048 + q, k 2048 x 2048 each + v 2048 x 4096, bf16
    # = 4,096,000 + 8,388,608 x 2 + 16,777,216 = 37,650,432 bytes; room 962,349,568;
    # floor(962,349,568 / 2,097,152) = 458 (459 x 2,097,152 = 962,592,768 is too many).
    assert short["max_batch"] == 458
    assert short["max_context"] is None  # the state fits: memory never bounds N


def test_gated_deltanet_prefill_is_a_chunked_scan(tmp_path: Path) -> None:
    r = analysis(tmp_path, GDN, phase="prefill").evaluate({"B": 1, "N": 1024})
    # chunks of c = min(1024, 64) = 64: each query also attends to (c-1)/2 = 31.5 earlier
    # keys of its chunk at 2 x (128 + 128) FLOPs: (dk + dv)(c - 1) = 256 x 63 = 16,128 per
    # head, beside the 114,688 of the state: 1024 x 32 x 130,816.
    assert op(r, "a")["flops"] == 4_286_578_688


def test_conv1d_state_and_costs(tmp_path: Path) -> None:
    # Qwen3-Next's conv runs over q, k and v: 2 x 16 x 128 + 32 x 128 = 8192 channels, 4 taps.
    body = "x = embed(tokens, 10 -> 8192)\n c = conv1d(x, 4)"
    r = analysis(tmp_path, body).evaluate({"B": 8, "N": 100})
    c = op(r, "c")
    assert c["flops"] == 2 * 8 * 8192 * 4 == 524_288
    assert c["weight_bytes"] == 8192 * 4 * 2
    # state: the last 3 inputs of 8192 channels, bf16 = 49,152 bytes a sequence,
    # read and written: 2 x 8 x 49,152.
    assert c["kv_bytes"] == 786_432
    assert r["memory"]["kv_bytes"] == 8 * 49_152
    assert r["params"]["total"] == 10 * 8192 + 8192 * 4


HYBRID = """
  x = embed(tokens, 10 -> 64)
  a = attention(x, x, x, 4, 4, 16)
  s = linear_attention(x, x, x, 4, 4, 16, 16)
"""


def test_hybrid_max_context_counts_the_state_once(tmp_path: Path) -> None:
    m = analysis(tmp_path, HYBRID).evaluate({"B": 1, "N": 4095})["memory"]
    # attention: 2 x 4 x 16 bf16 = 256 bytes a token; state 4 x 16 x 16 x 2 = 2048 bytes.
    assert m["kv_bytes"] == 4096 * 256 + 2048
    # room = 1e9 - 1280 (embed) = 999,998,720; (room - 2048) / 256 = 3,906,237 tokens,
    # less T = 1.
    assert m["max_context"] == 3_906_236
    # floor(999,998,720 / 1,050,624) = 951 (952 x 1,050,624 = 1,000,194,048).
    assert m["max_batch"] == 951


def test_sparse_attention_reads_the_selected_tokens(tmp_path: Path) -> None:
    body = "x = embed(tokens, 10 -> 64)\n a = attention(x, x, x, 4, 4, 16, index_topk=2048)"
    a = analysis(tmp_path, body)
    long, short = (a.evaluate({"B": 2, "N": n}) for n in (8192, 1000))
    per_token = 2 * 4 * 16 * 2  # K and V, bf16
    # N = 8192: min(8193, 2048) keys a query; reads 2 x 2048 tokens, writes 2.
    assert op(long, "a")["flops"] == 4 * 2 * 4 * 16 * 2048
    assert op(long, "a")["kv_bytes"] == 2 * 2048 * per_token + 2 * per_token
    # the cache itself still holds every token (the indexer may pick any of them)
    assert long["memory"]["kv_bytes"] == 2 * 8193 * per_token
    # N = 1000 < 2048: dense, 1001 keys.
    assert op(short, "a")["flops"] == 4 * 2 * 4 * 16 * 1001


def test_sparse_prefill_counts_the_causal_keys_below_top_k(tmp_path: Path) -> None:
    body = "x = embed(tokens, 10 -> 64)\n a = attention(x, x, x, 4, 4, 16, index_topk=2048)"
    r = analysis(tmp_path, body, phase="prefill").evaluate({"B": 1, "N": 8192})
    # query i of 8192 sees min(i, 2048) keys: (2048 x 2049 / 2 + 6144 x 2048) / 8192
    # = (2,098,176 + 12,582,912) / 8192 = 1792.125 a query; 4 x 8192 x 4 x 16 x 1792.125.
    assert op(r, "a")["flops"] == 3_758_358_528


# DeepSeek-V3.2-Exp config.json: 128 heads, kv_lora_rank 512, qk_rope_head_dim 64,
# qk_nope_head_dim 128, v_head_dim 128; index_n_heads 64, index_head_dim 128, index_topk 2048.
DSA = """
  x = embed(tokens, 10 -> 7168)
  q = linear(x, 7168 -> 128 * 192)
  c = linear(x, 7168 -> 576)
  iq = linear(x, 7168 -> 64 * 128)
  ik = linear(x, 7168 -> 128)
  sel = indexer(iq, ik, 64, 128, 2048, kv=fp8)
  a = mla(q, c, 128, 512, 64, 128, 128, index_topk=2048)
"""


def test_dsa_mla_reads_top_k_and_the_indexer_scans_all(tmp_path: Path) -> None:
    r = analysis(tmp_path, DSA).evaluate({"B": 1, "N": 32768})
    a, sel = op(r, "a"), op(r, "sel")
    # MLA over 2048 selected keys: absorb 2 x 128 x 512 x 256 = 33,554,432; per key
    # 2 x 128 x 576 + 2 x 128 x 512 = 278,528, x 2048 = 570,425,344.
    assert a["flops"] == 603_979_776
    # latent 576 bf16 = 1152 bytes a token: 2048 read + 1 written.
    assert a["kv_bytes"] == 2048 * 1152 + 1152
    # indexer: 32,769 keys x (2 x 64 x 128 + 3 x 64) = 32,769 x 16,576.
    assert sel["flops"] == 543_178_944
    # its fp8 key cache (128 bytes a token) is read in full: 32,768 x 128 + 128 written.
    assert sel["kv_bytes"] == 4_194_432
    # q (8192) and k (128) in, bf16, + 2048 int32 indices out.
    assert sel["act_bytes"] == (8192 + 128) * 2 + 2048 * 4
    assert r["memory"]["kv_bytes_per_token"] == 1152 + 128


# DeepSeek-V3's MLA (config.json: 128 heads, kv_lora_rank 512, qk_rope_head_dim 64,
# qk_nope_head_dim 128, v_head_dim 128), without the indexer.
MLA = """
  x = embed(tokens, 10 -> 7168)
  q = linear(x, 7168 -> 128 * 192)
  c = linear(x, 7168 -> 576)
  a = mla(q, c, 128, 512, 64, 128, 128)
"""


def test_mla_decodes_absorbed_and_prefills_materialised(tmp_path: Path) -> None:
    up = 2 * 128 * 512 * (128 + 128)              # kv_b_proj on one token: 33,554,432
    decode = analysis(tmp_path, MLA).evaluate({"B": 1, "N": 4095})
    # decode, 4096 keys: absorbed 33,554,432 + 4096 x 278,528 = 1,174,405,120; expanding
    # 4096 keys instead would cost 4096 x 33,554,432 = 137 GFLOP.
    assert op(decode, "a")["flops"] == up + 4096 * 278_528
    prefill = analysis(tmp_path, MLA, phase="prefill").evaluate({"B": 1, "N": 4096})
    # prefill of 4096: (4096 + 1) / 2 = 2048.5 keys a query. Absorbed: 4096 x (33,554,432
    # + 2048.5 x 278,528) = 2.47e12. Materialised: 4096 keys expanded, 4096 x 33,554,432
    # = 137,438,953,472, + 4096 x 2048.5 x 2 x 128 x (128 + 64 + 128) = 687,279,489,024.
    assert op(prefill, "a")["flops"] == 4096 * up + 4096 * 2048.5 * 81_920
    # the cache is the latent either way: 4096 new tokens x 576 bf16
    assert op(prefill, "a")["kv_bytes"] == 4096 * 1152
    chunk = analysis(tmp_path, MLA).evaluate({"B": 2, "N": 1024, "T": 2048})
    # a chunk of 2048 on 1024 cached, 2 sequences: 1024 + 2049 / 2 = 2048.5 keys a query.
    # Materialised: (2 x 1024 cached + 4096 new) keys expanded + 4096 x 2048.5 x 81,920
    # = 206,158,430,208 + 687,279,489,024 (absorbed: 2.47e12, as the prefill above).
    assert op(chunk, "a")["flops"] == 6144 * up + 4096 * 2048.5 * 81_920


@pytest.mark.parametrize("phase,edits", [("decode", {"B": 8, "N": 4095}),
                                         ("decode", {"B": 2, "N": 1024, "T": 2048}),
                                         ("prefill", {"B": 2, "N": 8192})])
def test_workbook_of_mla_equals_eval(tmp_path: Path, soffice: str, phase: str,
                                     edits: dict) -> None:
    # The Min of MLA's two forms as a live formula: the absorbed form at T = 1, the
    # materialised one in a chunk of 2048 on 1024 cached and in a prefill.
    from test_workbook import _assert_close, _no_error_cells, _recalculated
    from workbooks import named_cell
    a = analysis(tmp_path, MLA, phase=phase)
    wb = _recalculated(tmp_path, a, edits, soffice)
    expected = a.evaluate(edits)
    assert _no_error_cells(wb) == []
    _assert_close(named_cell(wb, "out_flops").value, expected["step"]["flops"], "flops")
    _assert_close(named_cell(wb, "out_roofline_s").value, expected["step"]["roofline_s"], "roofline_s")


def test_softcapping_adds_three_flops_per_logit(tmp_path: Path) -> None:
    body = ("x = embed(tokens, 10 -> 64)\n a = attention(x, x, x, 4, 4, 16, softcap=50)\n"
            " y = linear(x, 64 -> 100, softcap=30)")
    r = analysis(tmp_path, body).evaluate({"B": 2, "N": 100})
    # 101 keys: 4 x 2 x 4 x 16 x 101 + 3 x (2 tokens x 4 heads x 101 logits)
    assert op(r, "a")["flops"] == 51_712 + 2_424
    # 2 x 2 x 64 x 100 + 3 x 2 x 100 logits
    assert op(r, "y")["flops"] == 25_600 + 600


def test_biases_keep_their_own_format(tmp_path: Path) -> None:
    body = ("weights: mxfp4; biases: bf16; act: bf16\n x = embed(tokens, 10 -> 64)\n"
            " y = linear(x, 64 -> 32, bias=1)")
    r = analysis(tmp_path, body).evaluate({"B": 1})
    # 64 x 32 mxfp4 (17/32 bytes) = 1088 bytes + 32 bf16 biases = 64 bytes.
    assert op(r, "y")["weight_bytes"] == 1088 + 64
    # the embedding: 10 x 64 mxfp4 = 340 bytes
    assert r["memory"]["weights_bytes"] == 340 + 1088 + 64


def test_gpt_oss_expert_biases_in_bf16(tmp_path: Path) -> None:
    text = (ROOT / "specs" / "models" / "gpt_oss_20b.arch").read_text()
    assert text.count("      weights: mxfp4\n") == 1
    path = tmp_path / "oss.arch"
    path.write_text(text.replace("      weights: mxfp4\n", "      weights: mxfp4; biases: bf16\n"))
    before = analyze(ROOT / "specs" / "models" / "gpt_oss_20b.arch", hw="h200_sxm")
    after = analyze(path, hw="h200_sxm")
    old, new = (x.evaluate({"B": 1, "N": 4096}) for x in (before, after))
    # expert biases: 24 layers x 32 experts x (2880 + 2880 + 2880) = 6,635,520 params,
    # at 2 bytes instead of 17/32: 6,635,520 x 47/32 = 9,745,920 bytes more.
    assert new["memory"]["weights_bytes"] - old["memory"]["weights_bytes"] == 9_745_920
    assert new["params"] == old["params"]
    # one expert's gate at B = 1 (4 of 32 experts touched): 2880 x 2880 x 17/32 =
    # 4,406,400 bytes of weights + 2880 x 2 of bias, four times.
    assert op(new, "decoder.g")["weight_bytes"] == 4 * (4_406_400 + 5_760)


def test_recurrent_state_shards_with_its_heads(tmp_path: Path) -> None:
    body = ("policy full { split attention over tp }\n" + GDN.replace(
        "  q = linear(x, hidden -> kh * dk)", "  q = linear(x, hidden -> kh * dk) group attention")
        .replace("  a = linear_attention(q, k, v,", "  qc = conv1d(q, 4)\n"
                 "  a = linear_attention(qc, k, v,") + "  o = linear(a, vh * dv -> hidden)\n"
        "  x = add(x, o)\n")
    a = analysis(tmp_path, body)
    one, two = (a.evaluate({"B": 8, "tp": tp}) for tp in (1, 2))
    # per sequence: the 2,097,152-byte state + the conv's 3 x 2048 bf16 = 12,288 bytes;
    # at tp = 2 each GPU holds half of both: q (a column-parallel linear) arrives split,
    # so the conv keeps its 1024 channels a GPU, and the state its 16 of 32 heads.
    assert one["memory"]["kv_bytes_per_gpu"] == 8 * (2_097_152 + 12_288)
    assert two["memory"]["kv_bytes_per_gpu"] == 4 * (2_097_152 + 12_288)
    assert op(two, "a")["flops"] == 29_360_128 / 2
    assert two["step"]["collectives"] == 1  # the all-reduce after the row-parallel o


def test_mamba2_maps_onto_linear_attention(tmp_path: Path) -> None:
    # Nemotron-H Mamba-2 (nvidia/Nemotron-H-8B-Base-8K config.json: mamba_num_heads 128,
    # mamba_head_dim 64, ssm_state_size 128, n_groups 8): C and B are 8 x 128 = 1024 wide,
    # x 128 x 64 = 8192; the state in fp32.
    body = ("x = embed(tokens, 10 -> 8192)\n cb = linear(x, 8192 -> 1024)\n"
            " y = linear_attention(cb, cb, x, 128, 8, 128, 64, kv=fp32)\n g = sigmoid(y)")
    r = analysis(tmp_path, body).evaluate({"B": 4, "N": 4096})
    # 128 x 128 x 64 = 1,048,576 values x 4 bytes a sequence, 4 sequences.
    assert r["memory"]["kv_bytes"] == 4 * 4_194_304
    # no delta rule: 5 x 128 x 64 = 40,960 FLOPs a head, 128 heads, 4 tokens.
    assert op(r, "y")["flops"] == 4 * 128 * 40_960
    assert op(r, "g")["flops"] == 4 * 4 * 8192  # sigmoid: 4 FLOPs an element


HYBRID_SPEC = ROOT / "tests" / "fixtures" / "hybrid_state.arch"


@pytest.mark.parametrize("phase,edits", [("decode", {"B": 8, "N": 100_000}),
                                         ("prefill", {"B": 2, "N": 8192}),
                                         ("decode", {"B": 4, "tp": 2, "topk": 512})])
def test_workbook_of_the_new_kinds_equals_eval(tmp_path: Path, soffice: str, phase: str,
                                               edits: dict) -> None:
    from test_workbook import _assert_close, _no_error_cells, _recalculated
    from workbooks import named_cell
    a = analyze(HYBRID_SPEC, hw="h200_sxm", phase=phase)
    wb = _recalculated(tmp_path, a, edits, soffice)
    expected = a.evaluate(edits)
    assert _no_error_cells(wb) == []
    for section in ("memory", "step"):
        for key, want in expected[section].items():
            name = "out_step_kv_bytes" if (section, key) == ("step", "kv_bytes") else f"out_{key}"
            _assert_close(named_cell(wb, name).value, want, key)


def test_hybrid_fixture_memory(tmp_path: Path) -> None:
    m = analyze(HYBRID_SPEC, hw="h200_sxm").evaluate({"B": 1, "N": 4095})["memory"]
    # a token: attention 2 x 2 x 128 bf16 = 1024 bytes + the indexer's 128 fp8 = 1152;
    # a sequence's states: 3 x (32 x 128 x 128 x 4 = 2,097,152 + conv 3 x (2048 + 2048 +
    # 4096) x 2 = 49,152) = 6,438,912 bytes, held at any N.
    assert m["kv_bytes_per_token"] == 1152
    assert m["kv_bytes"] == 4096 * 1152 + 6_438_912


@pytest.mark.parametrize("kernel,target", [
    ("causal_conv1d_update_kernel", "conv1d"),
    ("fused_recurrent_gated_delta_rule_fwd_kernel", "linear_attention"),
    ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "linear_attention"),
    ("_chunk_scan_fwd_kernel", "linear_attention"),
    ("deep_gemm::fp8_paged_mqa_logits", "indexer"),  # not the gemm it also names
])
def test_nsys_names_the_new_kinds(kernel: str, target: str) -> None:
    from infest.compiler.analyses.nsys import default_patterns, match
    assert match(kernel, default_patterns()) == target


# ---- the op-kind table: every facet declared in one entry ------------------------------

def test_every_op_kind_declares_every_facet() -> None:
    from infest.compiler.core.ops import FUSION_FACETS, OPS, PARALLEL_FACETS
    from infest.compiler.passes.parallel import PARALLEL_RULES
    for kind, rule in OPS.items():
        assert rule.parallel in PARALLEL_FACETS and rule.parallel in PARALLEL_RULES, kind
        assert rule.fusion in FUSION_FACETS, kind
        assert isinstance(rule.kernels, int) and rule.kernels >= 0, kind
        assert isinstance(rule.every_token, bool), kind
        assert rule.doc, kind
    # The sharding pass has a rule for every facet and no rule beyond them.
    assert set(PARALLEL_RULES) == set(PARALLEL_FACETS)


def test_a_kind_lacking_a_facet_fails_when_the_table_loads() -> None:
    from infest.compiler.core.ops import OpRule, OPS
    linear = OPS["linear"]
    with pytest.raises(TypeError):  # no parallel, fusion or every_token facet
        OpRule((1, 1), linear.rule, 1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="parallel facet"):
        OpRule((1, 1), linear.rule, 1, "sideways", "on_chip", False)


def test_a_toy_op_kind_is_one_table_entry(tmp_path: Path, monkeypatch) -> None:
    from infest.compiler.core.ops import OPS, OpRule
    from infest.compiler.core.cost import Cost
    from infest.compiler.core.ops import OpOut

    def toy(op):  # 10 FLOPs per element, reads and writes the tensor once (bf16)
        elements = op.tokens * op.x.width
        return OpOut(op.x.width, Cost(flops=10 * elements, act_bytes=2 * 2 * elements))
    monkeypatch.setitem(OPS, "toy", OpRule((1, 1), toy, 3, "elementwise", "on_chip", True,
                                           doc="a toy"))
    body = """
  hidden = 1024
  policy full { split embedding, mlp over tp }
  x = embed(tokens, 1000 -> hidden)  group embedding
  u = linear(x, hidden -> 4096)      group mlp
  t = toy(u)
  y = linear(t, 4096 -> hidden)
"""
    r = analysis(tmp_path, body).evaluate({"B": 4, "tp": 2})
    t = op(r, "t")
    # Elementwise under tp: the split input (4096 / 2 columns) stays split: 4 tokens x
    # 2048 x 10 FLOPs = 81,920; bytes 2 x 2 x 4 x 2048 = 32,768; 3 kernels as declared.
    assert (t["flops"], t["act_bytes"], t["kernels"]) == (81_920, 32_768, 3)
    # every_token: the kind refuses last_token=1.
    with pytest.raises(SpecError, match="needs every new token"):
        analysis(tmp_path, body.replace("t = toy(u)", "t = toy(u, last_token=1)"))
