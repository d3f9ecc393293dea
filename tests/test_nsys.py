"""The Nsight Systems kern_sum reader and the kernel-name mapping.

Fixtures in tests/fixtures/nsys/ are written for these tests in the format
`nsys stats --report cuda_gpu_kern_sum --format csv` prints (see the README there).
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infest.compiler.analyses import nsys
from infest.compiler.analyses.nsys import Pattern, default_patterns, match, read_kern_sum, read_mapping
from infest.dsl.errors import SpecError

FIX = Path(__file__).parent / "fixtures" / "nsys"
TARGETS = {"linear", "attention", "embed", "q", "norm", "comm", "ignore", "rmsnorm"}


def test_realistic_capture_with_preamble_and_template_names() -> None:
    kernels = read_kern_sum(FIX / "llama_decode.csv")
    assert len(kernels) == 9                       # nine kernel rows after 5 preamble lines
    gemv = kernels[0]
    assert gemv.name.startswith("void gemv2T_kernel_val<int, int, __nv_bfloat16")
    assert gemv.name.endswith("(T13, T6, T6)")     # quoted commas kept inside the name
    assert gemv.total_s == pytest.approx(0.042)    # 42,000,000 ns
    assert gemv.instances == 2240                  # 32 layers x 7 linears x 10 steps
    assert gemv.line == 7                          # the header is line 6
    assert gemv.grid is None and gemv.block is None


def test_bom_quoted_header_doubled_quotes_and_commas() -> None:
    first, second = read_kern_sum(FIX / "bom_preamble.csv")
    assert first.name == 'kernel "quoted", with, commas<int, float>'
    assert first.total_s == pytest.approx(600e-9) and first.instances == 3
    assert second.name.startswith("ncclDevKernel_AllReduce")


def test_grid_and_block_columns_found_by_header_text() -> None:
    gemv, norm = read_kern_sum(FIX / "grid_block.csv")
    assert gemv.grid == "32    1    1" and gemv.block == "128    1    1"
    assert norm.grid == "1024    1    1"
    assert gemv.total_s == pytest.approx(3000e-9)  # Total Time is column 2, Name column 11


@pytest.mark.parametrize("name, line, message", [
    ("empty.csv", 1, "empty file"),
    ("header_only.csv", 1, "the header is followed by no kernel rows"),
    ("missing_instances.csv", 3, "the header lacks column(s) 'Instances'"),
    ("non_numeric.csv", 3, "'Total Time (ns)' is not a number: '1,000'"),
    ("broken_quote.csv", 3, "malformed CSV"),
    ("unquoted_commas.csv", 2, "11 cells where the header has 9"),
    ("fractional_instances.csv", 2, "'Instances' must be a whole number"),
    ("negative_time.csv", 2, "must be a number from 0 to MAX_CELL_VALUE"),
    ("not_csv.csv", 1, "no header row with"),
    ("nul_byte.csv", 2, "a control character"),
    ("latin1.csv", 2, "not UTF-8 text"),
])
def test_malformed_input_is_a_located_error(name: str, line: int, message: str) -> None:
    with pytest.raises(SpecError) as info:
        read_kern_sum(FIX / name)
    (diag,) = info.value.diagnostics
    assert diag.span.file.endswith(name) and diag.span.line == line
    assert message in diag.message
    assert str(info.value).startswith(f"{FIX / name}:{line}:1: error: ")


def test_file_size_limit_is_checked_before_reading(monkeypatch) -> None:
    monkeypatch.setattr(nsys, "MAX_CSV_BYTES", 100)
    with pytest.raises(SpecError, match="MAX_CSV_BYTES"):
        read_kern_sum(FIX / "llama_decode.csv")


def test_row_limit_is_named(monkeypatch) -> None:
    monkeypatch.setattr(nsys, "MAX_KERNEL_ROWS", 2)
    monkeypatch.setattr(nsys, "MAX_PREAMBLE_LINES", 1)
    with pytest.raises(SpecError, match="MAX_KERNEL_ROWS"):
        read_kern_sum(FIX / "llama_decode.csv")


def test_default_patterns_map_the_usual_kernel_names() -> None:
    names = [k.name for k in read_kern_sum(FIX / "llama_decode.csv")]
    got = [match(n, default_patterns()) for n in names]
    # gemv, sm90_xmma, flash, fused_add_rms_norm (norm, not the *add* elementwise rule),
    # act_and_mul, rotary, reshape_and_cache_flash (flash), indexSelect and argmax: none
    assert got == ["linear", "linear", "attention", "norm", "elementwise", "rope", "attention",
                   None, None]
    assert match("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", default_patterns()) == "comm"


def test_mapping_file_comes_first_and_ignores() -> None:
    patterns = read_mapping(FIX / "llama.map", TARGETS) + default_patterns()
    assert patterns[0] == Pattern("*rotary_embedding*", "q", 3)  # after two comment lines
    assert match("void vllm::Rotary_Embedding_kernel<float>", patterns) == "q"  # case-insensitive
    assert match("at::native::reduce_kernel<ArgMaxOps<float>>", patterns) == "ignore"


@pytest.mark.parametrize("name, line, message, hint", [
    ("bad_target.map", 2, "unknown target 'rmsnrom'", "did you mean 'rmsnorm'?"),
    ("no_equals.map", 2, "expected `pattern = target`", "e.g. `*gemv* = linear`"),
])
def test_mapping_errors_are_located(name: str, line: int, message: str, hint: str) -> None:
    with pytest.raises(SpecError) as info:
        read_mapping(FIX / name, TARGETS)
    (diag,) = info.value.diagnostics
    assert (diag.span.line, diag.message, diag.hint) == (line, message, hint)


def test_globs_cannot_backtrack_catastrophically() -> None:
    # A regex like (a*)*b takes exponential time on "aaaa...c"; fnmatch's translation of
    # stars does not backtrack that way, so this finishes at once.
    pattern = [Pattern("*a*a*a*a*a*a*a*a*a*a*a*a*b", "linear")]
    start = time.perf_counter()
    assert match("a" * 5000 + "c", pattern) is None
    assert time.perf_counter() - start < 1.0


def test_pattern_length_limit(tmp_path: Path) -> None:
    path = tmp_path / "long.map"
    path.write_text("*" * (nsys.MAX_PATTERN_CHARS + 1) + " = linear\n")
    with pytest.raises(SpecError, match="MAX_PATTERN_CHARS"):
        read_mapping(path, TARGETS)


HEADER = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"


@settings(derandomize=True, max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=400), with_header=st.booleans())
def test_any_bytes_parse_or_give_a_located_error(tmp_path: Path, body: bytes,
                                                 with_header: bool) -> None:
    path = tmp_path / "fuzz.csv"
    path.write_bytes((HEADER.encode() if with_header else b"") + body)
    try:
        kernels = read_kern_sum(path)
    except SpecError as exc:
        (diag,) = exc.diagnostics
        assert diag.span.file == str(path) and diag.span.line >= 1  # always located
        return
    assert all(k.instances >= 1 and k.total_s >= 0 and k.name for k in kernels)
