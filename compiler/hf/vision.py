"""Vision towers of multimodal releases, counted for `infest import-hf`: params held in
memory (a `held` op in group `vision`), never run by a decode step nor counted in
params.total (compiler/core/ops.py `held`).

One counter per tower kind, each the sum of its tensors from `vision_config` (the
arithmetic is written out in tests/test_hf_families.py and tests/test_hf_hybrid.py). A
tower of a kind not listed here is not counted, and the spec's header says so.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from infest.compiler.hf.config import Config
from infest.dsl.errors import fail


def _vit_block(d: int, ffn: int) -> int:
    """One pre-LayerNorm ViT block: q, k, v, o and fc1, fc2 with biases, two LayerNorms."""
    return 4 * (d * d + d) + 2 * d * ffn + ffn + d + 2 * 2 * d


def _siglip(v: Config, text: Mapping[str, Any]) -> tuple[int, str]:
    """Gemma 3's SigLIP encoder (no pooling head) and its projector (mm_soft_emb_norm, an
    RMSNorm of the tower's width, and mm_input_projection to the text width)."""
    d, ps = v.int("hidden_size"), v.int("patch_size")
    grid = (v.int("image_size") // ps) ** 2
    tower = 3 * ps * ps * d + d + grid * d + v.int("num_hidden_layers") * \
        _vit_block(d, v.int("intermediate_size")) + 2 * d
    projector = d + d * int(text["hidden_size"])
    return tower + projector, (f"SigLIP tower {tower:,} ({v.int('num_hidden_layers')} blocks "
                               f"of width {d}) + projector {projector:,}")


def _llama4(v: Config, text: Mapping[str, Any]) -> tuple[int, str]:
    """Llama 4's tower: patch embedding (no bias), a class embedding, positions for the
    patch grid and the class token, pre/post LayerNorms, the blocks, the pixel-shuffle
    adapter MLP and the projector to the text width (no biases)."""
    d, ps = v.int("hidden_size"), v.int("patch_size")
    grid = (v.int("image_size") // ps) ** 2
    ratio = v.data.get("pixel_shuffle_ratio")
    if not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise fail(None, f"{v.source}: config field 'pixel_shuffle_ratio' must be a number "
                   f"in (0, 1], got {ratio!r}")
    shuffled = round(d / ratio ** 2)
    p_in, p_out = v.int("projector_input_dim"), v.int("projector_output_dim")
    blocks = v.int("num_hidden_layers") * _vit_block(d, v.int("intermediate_size"))
    total = 3 * ps * ps * d + d + (grid + 1) * d + 4 * d + blocks + shuffled * p_in \
        + p_in * p_out + v.int("vision_output_dim") * int(text["hidden_size"])
    return total, f"Llama 4 vision tower ({v.int('num_hidden_layers')} blocks of width {d})"


def _merger(v: Config, post_norm: bool) -> int:
    """A Qwen3-VL patch merger: a LayerNorm (over the tower's width, or over the merged
    width for a deepstack merger), fc1 merged -> merged and fc2 merged -> out_hidden_size,
    with biases; `merged` is the width of spatial_merge_size^2 patches side by side."""
    d, out = v.int("hidden_size"), v.int("out_hidden_size")
    merged = d * v.int("spatial_merge_size") ** 2
    return 2 * (merged if post_norm else d) + merged * merged + merged + merged * out + out


def _qwen3_vl(v: Config, text: Mapping[str, Any]) -> tuple[int, str]:
    """Qwen3-VL's tower (Qwen3.5 reuses it without the deepstack mergers): a 3-D patch
    convolution with bias (in_channels x temporal_patch_size x patch^2 -> width), the
    learned position table (num_position_embeddings rows), `depth` ViT blocks, the final
    merger and one deepstack merger per deepstack_visual_indexes entry."""
    d, ps, depth = v.int("hidden_size"), v.int("patch_size"), v.int("depth")
    deepstack = v.int_list("deepstack_visual_indexes")
    patch = v.int("in_channels") * v.int("temporal_patch_size") * ps * ps * d + d
    total = patch + v.int("num_position_embeddings") * d \
        + depth * _vit_block(d, v.int("intermediate_size")) \
        + _merger(v, False) + len(deepstack) * _merger(v, True)
    return total, f"Qwen3-VL vision tower ({depth} blocks of width {d}) and its mergers"


TOWERS: dict[str, Callable[[Config, Mapping[str, Any]], tuple[int, str]]] = {
    "gemma3": _siglip, "llama4": _llama4, "qwen3_vl": _qwen3_vl, "qwen3_vl_moe": _qwen3_vl,
    "qwen3_5": _qwen3_vl, "qwen3_5_moe": _qwen3_vl}


def tower(wrapper: str, vision: Any, text: Mapping[str, Any], source: str
          ) -> tuple[tuple[int, str] | None, tuple[str, ...]]:
    """((params, what), header lines) of a wrapper's vision tower; (None, a line saying it
    is not counted) for a kind not in TOWERS, (None, ()) when the config has none."""
    if not isinstance(vision, dict):
        return None, ()
    if wrapper not in TOWERS:
        return None, ("The vision tower (vision_config) is not counted: import-hf has no "
                      f"counter for {wrapper}'s tower; decode never runs it.",)
    params, what = TOWERS[wrapper](Config(vision, f"{source} vision_config"), text)
    return (params, what), (f"Vision: {what} = {params:,} params, held in memory (group "
                            "vision) and not run by a decode step; not in params.total.",)
