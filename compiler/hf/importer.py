"""import-hf's entry point: a config.json (and its quantization config) to .arch text.

Dispatches on `model_type`: dense and MoE families to compiler/hf/families.py, hybrid
recurrent families and vision-language wrappers to compiler/hf/hybrid.py; both render
through compiler/hf/render.py.
"""
from __future__ import annotations

from pathlib import Path

from infest.compiler.hf.config import load_json
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
    type such as Q4_K_M for the weights)."""
    data = load_json(config_path)
    quant = (load_json(quant_path), str(quant_path)) if quant_path is not None else None
    if data.get("model_type") in HYBRID_FAMILIES:
        return render_hybrid(read_hybrid(data, str(config_path), quant, name, gguf))
    if data.get("model_type") in VL_FAMILIES:
        return render(read_vl(data, str(config_path), quant, name, gguf))
    arch = read_arch(data, str(config_path), quant, name, gguf)
    return render(arch)
