"""The wheel a user installs: every module and shipped spec is in it, and the README's first
command (`infest eval` on a shipped spec) runs from a fresh venv with a non-editable install.

An editable install imports straight from the checkout, so it hides a subpackage missing
from the package list; this test installs the built wheel instead.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CODE = ("dsl", "compiler", "exports")


def _local_setuptools_builds_wheels() -> bool:
    """setuptools 70.1+ builds wheels by itself (older ones need the `wheel` package)."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    from importlib.metadata import version
    major, minor = (int(p) for p in version("setuptools").split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _build_wheel(out: Path) -> Path:
    """`pip wheel .`: with the local setuptools when it can (no network), else isolated."""
    isolation = ["--no-build-isolation"] if _local_setuptools_builds_wheels() else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *isolation,
                    "-w", str(out), str(ROOT)], check=True, capture_output=True, timeout=300)
    return next(out.glob("infest-*.whl"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_holds_every_module_and_spec(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = [f"infest/{p.relative_to(ROOT).as_posix()}" for top in CODE
              for p in (ROOT / top).rglob("*.py")]
    wanted += [f"infest/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / "specs").rglob("*.arch")]
    wanted += ["infest/dsl/grammar.lark", "infest/dsl/grammar_tables.json"]
    assert sorted(w for w in wanted if w not in names) == []


def test_fresh_venv_runs_the_readme_command(wheel: Path, tmp_path: Path) -> None:
    """A venv without the checkout on its path: infest from the wheel, its dependencies
    from this interpreter's site-packages (PYTHONPATH entries run no .pth files, so the
    editable install of the checkout stays out)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, timeout=300)
    python = venv / "bin" / "python"
    env = {**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{sysconfig.get_paths()['purelib']}",
           "INFEST_NO_CACHE": "1"}
    spec = ROOT / "specs" / "models" / "llama3_1_8b.arch"
    run = subprocess.run([str(python), "-c", "import sys; from infest.exports.cli import main; "
                          "sys.exit(main(sys.argv[1:]))", "eval", str(spec), "--hw", "h100_sxm"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "llama3_1_8b on h100_sxm" in run.stdout
    where = subprocess.run([str(python), "-c", "import infest.compiler, sys; "
                            "print(infest.compiler.__file__)"], env=env, capture_output=True,
                           text=True, cwd=tmp_path)
    assert str(target) in where.stdout   # the wheel's copy, not the checkout's


def test_version_flag_prints_the_package_version() -> None:
    from importlib.metadata import version
    run = subprocess.run([sys.executable, "-m", "infest.exports.cli", "--version"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0
    assert run.stdout.strip() == f"infest {version('infest')}"
