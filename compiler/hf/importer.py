"""import-hf's entry point: a config.json (and its quantization config) to .arch text.

Dispatches on `model_type`: dense and MoE families to compiler/hf/families.py, hybrid
recurrent families and vision-language wrappers to compiler/hf/hybrid.py; both render
through compiler/hf/render.py.
"""
from __future__ import annotations

from pathlib import Path

from infest.compiler.hf.config import load_json
from infest.compiler.load.files import MAX_SPEC_BYTES
from infest.dsl.errors import SpecError, fail, printable
from infest.dsl.parser import parse
from infest.compiler.hf.families import HYBRID_FAMILIES, VL_FAMILIES, read_arch
from infest.compiler.hf.hybrid import read_hybrid, read_vl, render_hybrid
from infest.compiler.hf.render import render


def sibling_quant_config(config_path: Path) -> Path | None:
    """A ModelOpt quant config beside a config: `hf_quant_config.json` next to
    `config.json`, else `<name>.hf_quant_config.json` or `<name>_hf_quant_config.json` for
    `<name>.config.json`, `<name>_config.json` or `<name>.json`."""
    name = config_path.name
    if name == "config.json":
        return _first_file([config_path.with_name("hf_quant_config.json")])
    stem = next((name[: -len(s)] for s in (".config.json", "_config.json", "-config.json",
                                            ".json") if name.endswith(s)), name)
    return _first_file([config_path.with_name(f"{stem}{sep}hf_quant_config.json")
                        for sep in (".", "_", "-")])


def _first_file(candidates: list[Path]) -> Path | None:
    return next((c for c in candidates if c.is_file()), None)


def import_hf(config_path: Path, quant_path: Path | None = None,
              name: str | None = None, gguf: str | None = None) -> str:
    """The .arch text for a config.json (and an optional hf_quant_config.json, or a GGUF
    type such as Q4_K_M for the weights), checked to be a spec infest reads: any error
    while reading the configs is a located error, never a traceback."""
    try:
        text = _import(config_path, quant_path, name, gguf)
    except (ArithmeticError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            RecursionError) as exc:
        raise fail(None, f"{printable(str(config_path))}: cannot import: a field of an "
                   f"unexpected type or size ({type(exc).__name__}: {printable(str(exc))[:200]})",
                   "check the config's numbers; import-hf reads JSON numbers of the usual "
                   "types and sizes") from None
    check_output(text, str(config_path))
    return text


def check_output(text: str, source: str) -> None:
    """The spec import-hf writes must be one infest reads: within MAX_SPEC_BYTES and
    parsed by the same parser (a 205-digit literal or a 3.8 MB header are refused here,
    not by the next command)."""
    size = len(text.encode("utf-8"))
    if size > MAX_SPEC_BYTES:
        raise fail(None, f"{printable(source)}: the spec would be {size:,} bytes, more than "
                   f"MAX_SPEC_BYTES = {MAX_SPEC_BYTES:,}", "a config field is unusually large")
    try:
        parse(text, "<import-hf output>")
    except SpecError as exc:
        raise fail(None, f"{printable(source)}: the spec written from it would not load: "
                   f"{exc.diagnostics[0].message}", "a config value outside what a spec "
                   "holds (see the message)") from None


def _import(config_path: Path, quant_path: Path | None, name: str | None,
            gguf: str | None) -> str:
    data = load_json(config_path)
    quant = (load_json(quant_path), str(quant_path)) if quant_path is not None else None
    if data.get("model_type") in HYBRID_FAMILIES:
        return render_hybrid(read_hybrid(data, str(config_path), quant, name, gguf))
    if data.get("model_type") in VL_FAMILIES:
        return render(read_vl(data, str(config_path), quant, name, gguf))
    arch = read_arch(data, str(config_path), quant, name, gguf)
    return render(arch)
