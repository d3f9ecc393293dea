"""Malformed and hostile specs never crash, hang or balloon: every case either compiles and
evaluates or fails with a located SpecError (never another exception), within a time
limit (an interval timer) and a memory limit (an address-space rlimit) per case."""
from __future__ import annotations

import os
import resource
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hypothesis import HealthCheck, given, settings, strategies as st

from infest.compiler.api import analyze
from infest.compiler.hf.importer import import_hf
from infest.dsl.errors import SpecError

LLAMA = (Path(__file__).parents[1] / "specs" / "models" / "llama3_1_8b.arch").read_text()
PIECES = ["(", ")", "{", "}", "->", "=", ":", ";", ",", "-", "/", "0", "1e40", "2^99", " GiB",
          "repeat", "group", "model", "x", "B", "N", "linear(", "moe(", "bf61", "#", "\n",
          "\"", "hidden", "/ 0", "-1", "1.5", "min(", "k", "tokens", " B", "2 B", "\n+ 1",
          "\x1b[2J", "\x00", "\u202e", "1e999999999", "9" * 5000]
HW = """hardware hw { mem_capacity = 1 GB; mem_bw = 1 TB/s; launch_overhead = 2 us
  flops_bf16 = 100 TFLOP/s }
"""
SECONDS = 10               # per case, generous for a 2-core machine shared by four
HEADROOM_BYTES = 1 << 30   # address space a case may add (a balloon raises MemoryError)
FUZZ = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@contextmanager
def bounded() -> Iterator[None]:
    """Fail the case (TimeoutError, MemoryError) if it runs past SECONDS or grows the
    address space by more than HEADROOM_BYTES; both limits are lifted afterwards."""
    def expire(*_: object) -> None:
        raise TimeoutError(f"case ran past {SECONDS} s")
    previous = signal.signal(signal.SIGALRM, expire)
    limits = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_address_space() + HEADROOM_BYTES, limits[1]))
    signal.setitimer(signal.ITIMER_REAL, SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, limits)


def _address_space() -> int:
    """This process's current virtual size in bytes (Linux /proc)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * resource.getpagesize()


def fresh(tmp_path: Path) -> Path:
    """A new folder per example (Hypothesis reuses one tmp_path for all of them)."""
    return Path(tempfile.mkdtemp(dir=tmp_path))


def compiles_or_reports(path: Path) -> None:
    """The contract: a result, or a printable located SpecError with no raw controls."""
    with bounded():
        try:
            result = analyze(path, hw="hw" if "hardware hw" in _text(path) else "h100_sxm"
                             ).evaluate({"B": 2, "N": 100})
        except SpecError as exc:
            message = str(exc)
            assert exc.diagnostics and message
            assert not any(c in message for c in "\x1b\x00\u202e")
        else:
            assert result["step"]["time_s"] is None or result["step"]["time_s"] >= 0


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


@st.composite
def mutations(draw: st.DrawFn) -> str:
    text = LLAMA
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 12))
        text = text[:at] + draw(st.sampled_from(PIECES + [""])) + text[at + cut:]
    return text


@settings(FUZZ, max_examples=150)
@given(text=mutations())
def test_mutated_spec_compiles_or_reports(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.arch"
    path.write_text(text)
    compiles_or_reports(path)


# ---- generators for the hostile classes of issue #8 ------------------------------------

def nested_expr(kind: str, depth: int) -> str:
    """An expression `depth` levels deep: calls, parentheses, left sums or powers."""
    if kind == "call":
        return "max(" * depth + "2" + ")" * depth
    if kind == "paren":
        return "(" * depth + "2" + ")" * depth
    if kind == "sum":
        return "+".join(["1"] * (depth + 1))
    return "-" * depth + "2"


@settings(FUZZ, max_examples=40)
@given(kind=st.sampled_from(["call", "paren", "sum", "neg"]), depth=st.integers(0, 600),
       repeats=st.integers(0, 200))
def test_deep_nesting(tmp_path: Path, kind: str, depth: int, repeats: int) -> None:
    body = (f" d = {nested_expr(kind, depth)}\n x = embed(tokens, 4 -> 4)\n"
            + " repeat 1 {\n" * repeats + " x = rmsnorm(x)\n" + " }\n" * repeats)
    path = tmp_path / "deep.arch"
    path.write_text(HW + "model m {\n" + body + "}\n")
    compiles_or_reports(path)


literals = st.one_of(
    st.builds(lambda n: "1" * n, st.integers(1, 200_000)),
    st.builds(lambda m, e: f"{m}e{e}", st.sampled_from(["1", "2.5", ".5"]),
              st.integers(-10**12, 10**12)),
    st.builds(lambda n, u: f"{'9' * n} {u}", st.integers(1, 300),
              st.sampled_from(["GB", "TB/s", "k", "us", "B"])))


@settings(FUZZ, max_examples=40)
@given(literal=literals, where=st.sampled_from(["param", "hw", "set"]))
def test_big_literals(tmp_path: Path, literal: str, where: str) -> None:
    path = tmp_path / "lit.arch"
    hw = HW.replace("mem_bw = 1 TB/s", f"mem_bw = {literal}") if where == "hw" else HW
    value = literal if where == "param" else "8"
    path.write_text(hw + f"model m {{\n d = {value}\n x = embed(tokens, 4 -> 4)\n}}\n")
    if where != "set":
        compiles_or_reports(path)
        return
    from infest.exports.cli.common import parse_sets
    with bounded():
        try:
            parse_sets([f"B={literal}"])
        except SpecError as exc:
            assert str(exc).startswith("error: --set B:")


SPECIAL = ["fifo", "dev_zero", "folder", "huge", "not_arch", "empty"]


def special_file(tmp_path: Path, kind: str) -> Path:
    """A path that is not an ordinary small .arch file."""
    path = tmp_path / f"{kind}.arch"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    elif kind == "huge":
        path.write_text("#" * (3 << 20))
    elif kind == "not_arch":
        path = tmp_path / "passwd"
        path.write_text("root:SECRET:0:0\n")
    else:
        path.write_text("")
    return path


@settings(FUZZ, max_examples=20)
@given(kind=st.sampled_from(SPECIAL), how=st.sampled_from(["spec", "import", "hw", "hf"]))
def test_special_files(tmp_path: Path, kind: str, how: str) -> None:
    tmp_path = fresh(tmp_path)
    target = special_file(tmp_path, kind)
    with bounded():
        try:
            if how == "hf":
                import_hf(target)
            elif how == "hw":
                _write_model(tmp_path)
                analyze(tmp_path / "m.arch", hw=str(target))
            elif how == "import":
                _write_model(tmp_path, f'import "{target.name}"\n')
                analyze(tmp_path / "m.arch", hw="h100_sxm")
            else:
                analyze(target, hw="h100_sxm")
        except SpecError as exc:
            assert "SECRET" not in str(exc)
        else:
            assert kind == "empty" and how == "import"  # an empty import is harmless


def _write_model(tmp_path: Path, prefix: str = "") -> None:
    (tmp_path / "m.arch").write_text(prefix + "model m { x = embed(tokens, 2 -> 2) }\n")


@settings(FUZZ, max_examples=40)
@given(text=st.text(st.characters(max_codepoint=0x2070, blacklist_categories=["Cs"]),
                    max_size=30),
       where=st.sampled_from(["title", "line", "import"]))
def test_control_characters(tmp_path: Path, text: str, where: str) -> None:
    safe = text.replace('"', "").replace("\n", "").replace("\r", "")
    body = {"title": f'model m "{safe}" {{\n x = embed(tokens, 2 -> 2)\n}}\n',
            "line": f"model m {{\n x = embed(tokens, 2 -> 2)\n y = {text}\n}}\n",
            "import": f'import "{safe}"\nmodel m {{ x = embed(tokens, 2 -> 2) }}\n'}[where]
    path = tmp_path / "ctl.arch"
    path.write_text(body, encoding="utf-8")
    compiles_or_reports(path)
    if where == "title":
        try:
            title = analyze(path).model.title
        except SpecError:
            return
        assert not any(c in title for c in "\x1b\x07\x00\x9b\u202e")


@settings(FUZZ, max_examples=40)
@given(cuts=st.lists(st.integers(0, len(LLAMA)), min_size=1, max_size=4),
       piece=st.sampled_from(["\n", "\n  group g\n", ";", "\n+ 1", " B", "\n)", "(\n"]))
def test_newline_traps(tmp_path: Path, cuts: list[int], piece: str) -> None:
    text = LLAMA
    for at in sorted(set(cuts), reverse=True):
        text = text[:at] + piece + text[at:]
    path = tmp_path / "nl.arch"
    path.write_text(text)
    compiles_or_reports(path)
