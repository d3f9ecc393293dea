"""The private cache of Runners (compiler/backend/cache.py): identical results, rebuilt when any
input file changes, never read from a folder or file someone else could have written."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infest.compiler.backend import cache
from infest.exports.cli.main import main

ROOT = Path(__file__).parents[1]
LLAMA = str(ROOT / "specs" / "models" / "llama3_1_8b.arch")
DEEPSEEK = str(ROOT / "specs" / "models" / "deepseek_v3.arch")


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("INFEST_CACHE_DIR", str(folder))
    return folder


def run(capsys, *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def forbid_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any rebuild from the spec (the uncached path) fails the test."""
    def no(*_a, **_k):
        raise AssertionError("rebuilt instead of reading the cache")
    monkeypatch.setattr("infest.compiler.api.analyze", no)


@pytest.mark.parametrize("args", [
    ("eval", LLAMA, "--hw", "h100_sxm", "--json"),
    ("eval", DEEPSEEK, "--hw", "h200_sxm", "--set", "ep=8", "--set", "dp=8", "--set", "B=64",
     "--policy", "experts_only"),
    ("eval", LLAMA, "--hw", "h100_sxm", "--phase", "prefill", "--engine", "graphs", "--csv"),
    ("sweep", LLAMA, "--hw", "gh200", "--B", "1..9", "--N", "1k..64k:x2", "--csv"),
    ("sweep", LLAMA, "--hw", "h100_sxm", "--B", "1,8", "--N", "4k", "--over", "tp=1,2",
     "--json", "--metric", "time_s"),
])
def test_cached_run_prints_exactly_what_the_uncached_one_did(capsys, cache_dir, monkeypatch, args):
    first = run(capsys, *args)
    assert len(list(cache_dir.glob("*.json"))) == 1
    forbid_building(monkeypatch)
    assert run(capsys, *args) == first


def test_an_edited_import_or_hardware_file_rebuilds(capsys, cache_dir, tmp_path):
    spec = tmp_path / "m.arch"
    dims = tmp_path / "dims.arch"
    hw = tmp_path / "hw.arch"
    dims.write_text("model dims {\n  x = embed(tokens, 10 -> 4)\n}\n")
    spec.write_text('import "dims.arch"\nmodel m {\n  width = 64\n  x = embed(tokens, 10 -> 4)\n'
                    "  y = linear(x, 4 -> width)\n}\n")
    hw.write_text((ROOT / "specs" / "hardware" / "h100_sxm.arch").read_text())
    args = ("eval", str(spec), "--hw", str(hw), "--model", "m", "--json")
    before = json.loads(run(capsys, *args))
    # the linear reads 4 x 64 bf16 weights = 512 bytes
    assert [op["weight_bytes"] for op in before["ops"]] == [8, 512]
    spec.write_text(spec.read_text().replace("width = 64", "width = 128"))
    assert json.loads(run(capsys, *args))["ops"][1]["weight_bytes"] == 1024  # 4 x 128 x 2
    dims.write_text("model dims {\n  x = embed(tokens, 10 -> 8)\n}\n")  # an import: rebuild
    run(capsys, *args)
    assert recorded(cache_dir, dims) == hashlib.sha256(dims.read_bytes()).hexdigest()
    hw.write_text(hw.read_text().replace("3.35 TB/s", "4 TB/s"))
    after = json.loads(run(capsys, *args))
    assert after["inputs"]["mem_bw"] == 4e12 and before["inputs"]["mem_bw"] == 3.35e12
    # no file's content is part of the key: every file is checked on each read and an
    # edited one rebuilds the entry in place
    assert len(list(cache_dir.glob("*.json"))) == 1


def recorded(cache_dir: Path, path: Path) -> str:
    """The digest the newest entry recorded for a file."""
    newest = max(cache_dir.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    reads = json.loads(newest.read_text())["reads"]
    return next(r["sha256"] for r in reads if r["path"] == str(path))


def test_a_folder_others_can_write_is_never_used(capsys, cache_dir, monkeypatch):
    run(capsys, "eval", LLAMA, "--hw", "h100_sxm")
    os.chmod(cache_dir, 0o777)
    assert cache.cache_dir() is None
    forbid_building(monkeypatch)
    with pytest.raises(AssertionError, match="rebuilt"):
        main(["eval", LLAMA, "--hw", "h100_sxm"])


def test_a_tampered_entry_is_rebuilt_not_run(capsys, cache_dir):
    first = run(capsys, "eval", LLAMA, "--hw", "h100_sxm", "--json")
    (entry,) = cache_dir.glob("*.json")
    data = json.loads(entry.read_text())
    data["runner"]["source"] = "def forms(a0):\n    return (__import__(a0),)\n"
    entry.write_text(json.dumps(data))
    assert run(capsys, "eval", LLAMA, "--hw", "h100_sxm", "--json") == first
    assert "__import__" not in entry.read_text()  # replaced by a fresh build
    entry.chmod(0o666)  # writable by others: ignored, rebuilt
    assert run(capsys, "eval", LLAMA, "--hw", "h100_sxm", "--json") == first
    assert entry.stat().st_mode & 0o777 == 0o600


def test_no_cache_switch(capsys, cache_dir, monkeypatch):
    monkeypatch.setenv("INFEST_NO_CACHE", "1")
    run(capsys, "eval", LLAMA, "--hw", "h100_sxm")
    assert not cache_dir.exists() or not list(cache_dir.glob("*.json"))


def test_a_cached_eval_or_sweep_process_does_not_import_sympy(cache_dir):
    code = ("import sys; from infest.exports.cli.main import main; "
            f"main(['eval', {LLAMA!r}, '--hw', 'h100_sxm']); "
            f"main(['sweep', {LLAMA!r}, '--hw', 'h100_sxm', '--B', '1..99', '--N', '4k']); "
            "print('SYMPY' if 'sympy' in sys.modules else 'NO-SYMPY', file=sys.stderr)")
    env = {**os.environ, "INFEST_CACHE_DIR": str(cache_dir)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True) for _ in range(2)]
    assert runs[0].stderr.strip() == "SYMPY"        # built: sympy used
    assert runs[1].stderr.strip() == "NO-SYMPY"     # cached: never imported
    assert runs[0].stdout == runs[1].stdout


# ---- staleness: the entry is keyed on what the parser read and where each name led -----

DIMS = "model dims {{\n  x = embed(tokens, 10 -> {width})\n}}\n"
USES = 'import "{name}"\nmodel m {{\n  x = embed(tokens, 10 -> 4)\n  y = linear(x, 4 -> 4)\n}}\n'


def params(capsys, spec: Path, *extra: str) -> int:
    out = json.loads(run(capsys, "eval", str(spec), "--model", "m", "--json", *extra))
    return out["memory"]["weight_bytes"]


def test_a_repointed_import_symlink_rebuilds(capsys, cache_dir, tmp_path):
    """`ln -sfn v2.arch dims.arch` after a cached run: the entry recorded the link's
    target and the bytes read through it, so the next run rebuilds."""
    (tmp_path / "v1.arch").write_text("hardware hw { mem_capacity = 1 GB; mem_bw = 1 TB/s; "
                                      "launch_overhead = 1 us; flops_bf16 = 1 PFLOP/s }\n")
    (tmp_path / "v2.arch").write_text("hardware hw { mem_capacity = 1 GB; mem_bw = 2 TB/s; "
                                      "launch_overhead = 1 us; flops_bf16 = 1 PFLOP/s }\n")
    link = tmp_path / "hw.arch"
    link.symlink_to("v1.arch")
    spec = tmp_path / "m.arch"
    spec.write_text(USES.format(name="hw.arch"))
    args = ("eval", str(spec), "--hw", "hw", "--json")
    assert json.loads(run(capsys, *args))["inputs"]["mem_bw"] == 1e12
    link.unlink()
    link.symlink_to("v2.arch")  # same content length, same mtime granularity: only the link moved
    assert json.loads(run(capsys, *args))["inputs"]["mem_bw"] == 2e12


def test_a_local_file_that_now_shadows_a_shipped_import_rebuilds(capsys, cache_dir, tmp_path):
    """An import of `h100_sxm.arch` found the shipped file; a local file of that name
    placed later wins the lookup, so the entry (which recorded "shipped") is stale."""
    spec = tmp_path / "m.arch"
    spec.write_text(USES.format(name="h100_sxm.arch"))
    args = ("eval", str(spec), "--hw", "h100_sxm", "--json")
    assert json.loads(run(capsys, *args))["inputs"]["mem_bw"] == 3.35e12  # shipped H100
    shipped_text = (ROOT / "specs" / "hardware" / "h100_sxm.arch").read_text()
    (tmp_path / "h100_sxm.arch").write_text(shipped_text.replace("3.35 TB/s", "1 TB/s"))
    # --hw h100_sxm is the spec's own block now (the local import defines it)
    assert json.loads(run(capsys, *args))["inputs"]["mem_bw"] == 1e12


def test_an_import_edited_while_the_entry_is_built_is_not_cached_stale(
        capsys, cache_dir, tmp_path, monkeypatch):
    """The record holds the digest of the bytes the parser read, not of the file when the
    entry is written: an edit between the two makes the next run rebuild."""
    dims = tmp_path / "dims.arch"
    dims.write_text(DIMS.format(width=4))
    spec = tmp_path / "m.arch"
    spec.write_text(USES.format(name="dims.arch"))
    real_store = cache.store

    def store_after_an_edit(*a, **k):
        dims.write_text(DIMS.format(width=8))  # edited after parsing, before the write
        real_store(*a, **k)
    monkeypatch.setattr(cache, "store", store_after_an_edit)
    args = ("eval", str(spec), "--model", "dims", "--hw", "h100_sxm", "--json")
    # decode at B = 1 reads one embedding row: width x 2 bytes (bf16)
    assert json.loads(run(capsys, *args))["ops"][0]["weight_bytes"] == 4 * 2  # the old file
    monkeypatch.setattr(cache, "store", real_store)
    assert json.loads(run(capsys, *args))["ops"][0]["weight_bytes"] == 8 * 2  # the new one


def test_a_corrupt_own_entry_is_rebuilt_whatever_it_holds(capsys, cache_dir):
    first = run(capsys, "eval", LLAMA, "--hw", "h100_sxm", "--json")
    (entry,) = cache_dir.glob("*.json")
    good = json.loads(entry.read_text())
    bad_runner = {**good, "runner": {**good["runner"], "defaults": {"B": [1, 0]}}}
    for text in ["[" * 100_000 + "]" * 100_000,    # RecursionError in a naive json.loads
                 json.dumps(bad_runner),            # Fraction(1, 0): ZeroDivisionError
                 json.dumps({**good, "reads": [{"path": 1}]}), "null", "\udcff"]:
        entry.write_text(text, errors="surrogateescape")
        assert run(capsys, "eval", LLAMA, "--hw", "h100_sxm", "--json") == first


def test_no_home_or_a_relative_xdg_folder_means_no_cache_there(tmp_path, monkeypatch):
    monkeypatch.delenv("INFEST_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "infest"  # relative: ignored
    assert not (tmp_path / "relative").exists()
    monkeypatch.delenv("HOME")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(
        RuntimeError("Could not determine home directory."))))
    assert cache.cache_dir() is None


def test_the_key_reads_no_file(tmp_path, monkeypatch):
    """entry_key never opens the spec (a huge or blocking file is the loader's to refuse)."""
    fifo = tmp_path / "m.arch"
    os.mkfifo(fifo)
    assert len(cache.entry_key(str(fifo), None, phase="decode")) == 64


def test_an_edited_engine_profile_rebuilds(capsys, cache_dir):
    """A profile is read outside the parser (no entry records it): its size and mtime are
    in the key, so an entry built under the old vllm.json is not read under a new one.
    Touching the shipped file's mtime (restored after) stands for an edit of it."""
    from infest.compiler.load.engine_profiles import engines_dir
    before = cache.entry_key("m.arch", "h100_sxm", engine="vllm")
    path = engines_dir() / "vllm.json"
    st = path.stat()
    try:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        assert cache.entry_key("m.arch", "h100_sxm", engine="vllm") != before
    finally:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cache.entry_key("m.arch", "h100_sxm", engine="vllm") == before
