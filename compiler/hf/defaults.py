"""A family's documented defaults for the fields a published config may leave out
(`infest import-hf`): what transformers' configuration class sets when the key is absent.

Only fields that change the cost or the context are listed: the vocabulary, the MLP's
activation, the trained context (max_position_embeddings), the sliding window and its
pattern, whether the LM head is tied. A key absent from the config takes the value here,
and the spec's header names every default it took; a key written as null stays null (as
transformers keeps an explicit None). Shape fields (hidden_size, layers, heads, widths)
have no default here: a config without them is refused, naming the field.

Source of every value: the class's `__init__` defaults in transformers v4.57.1,
src/transformers/models/<family>/configuration_<family>.py (DEFAULTS_SOURCE).
"""
from __future__ import annotations

from typing import Any, Mapping

DEFAULTS_SOURCE = "transformers 4.57.1"
# Families whose configuration class lives in another family's module.
_MODULE = {"gemma3_text": "gemma3"}

# family -> {field: default}. The comment names the configuration class.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"vocab_size": 32000, "hidden_act": "silu", "max_position_embeddings": 2048,
              "tie_word_embeddings": False},                              # LlamaConfig
    "mistral": {"vocab_size": 32000, "hidden_act": "silu",
                "max_position_embeddings": 131072, "sliding_window": 4096,
                "tie_word_embeddings": False},                            # MistralConfig
    "mixtral": {"vocab_size": 32000, "hidden_act": "silu",
                "max_position_embeddings": 131072, "sliding_window": None,
                "tie_word_embeddings": False},                            # MixtralConfig
    "qwen2": {"vocab_size": 151936, "hidden_act": "silu", "max_position_embeddings": 32768,
              "use_sliding_window": False, "tie_word_embeddings": False},   # Qwen2Config
    "qwen3": {"vocab_size": 151936, "hidden_act": "silu", "max_position_embeddings": 32768,
              "use_sliding_window": False, "head_dim": 128,
              "tie_word_embeddings": False},                              # Qwen3Config
    "qwen3_moe": {"vocab_size": 151936, "hidden_act": "silu",
                  "max_position_embeddings": 32768, "use_sliding_window": False,
                  "tie_word_embeddings": False},                          # Qwen3MoeConfig
    "phi3": {"vocab_size": 32064, "hidden_act": "silu", "max_position_embeddings": 4096,
             "sliding_window": None, "tie_word_embeddings": False},        # Phi3Config
    "phi": {"vocab_size": 51200, "hidden_act": "gelu_new", "max_position_embeddings": 2048,
            "tie_word_embeddings": False},                                 # PhiConfig
    "gemma2": {"vocab_size": 256000, "hidden_activation": "gelu_pytorch_tanh",
               "max_position_embeddings": 8192, "sliding_window": 4096,
               "tie_word_embeddings": True},                               # Gemma2Config
    "gemma3_text": {"vocab_size": 262208, "hidden_activation": "gelu_pytorch_tanh",
                    "max_position_embeddings": 131072, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "head_dim": 256,
                    "tie_word_embeddings": True},                          # Gemma3TextConfig
    "falcon": {"vocab_size": 65024, "activation": "gelu", "max_position_embeddings": 2048,
               "tie_word_embeddings": True},                               # FalconConfig
    "olmo2": {"vocab_size": 50304, "hidden_act": "silu", "max_position_embeddings": 2048,
              "tie_word_embeddings": False},                               # Olmo2Config
    "olmo3": {"vocab_size": 50304, "hidden_act": "silu", "max_position_embeddings": 2048,
              "sliding_window": 4096, "tie_word_embeddings": False},        # Olmo3Config
    "exaone4": {"vocab_size": 102400, "hidden_act": "silu", "max_position_embeddings": 2048,
                "sliding_window": 4096, "sliding_window_pattern": 4,
                "tie_word_embeddings": False},                             # Exaone4Config
    "starcoder2": {"vocab_size": 49152, "hidden_act": "gelu_pytorch_tanh",
                   "max_position_embeddings": 4096, "sliding_window": None,
                   "tie_word_embeddings": True},                           # Starcoder2Config
    "cohere": {"vocab_size": 256000, "hidden_act": "silu", "max_position_embeddings": 8192,
               "tie_word_embeddings": True},                               # CohereConfig
    "glm4_moe": {"vocab_size": 151552, "hidden_act": "silu",
                 "max_position_embeddings": 131072,
                 "tie_word_embeddings": False},                            # Glm4MoeConfig
    "deepseek_v2": {"vocab_size": 32000, "hidden_act": "silu",
                    "max_position_embeddings": 2048,
                    "tie_word_embeddings": False},                         # DeepseekV2Config
    "deepseek_v3": {"vocab_size": 129280, "hidden_act": "silu",
                    "max_position_embeddings": 4096,
                    "tie_word_embeddings": False},                         # DeepseekV3Config
}


def with_defaults(data: Mapping[str, Any], family: str) -> tuple[dict[str, Any], list[str]]:
    """The config with its family's defaults for the keys it leaves out, and the
    `field = value` of each default taken (for the spec's header)."""
    table = FAMILY_DEFAULTS.get(family, {})
    taken = {k: v for k, v in table.items() if k not in data}
    return dict(data) | taken, [f"{k} = {v}" for k, v in taken.items() if v is not None]


def defaults_note(family: str, taken: list[str]) -> tuple[str, ...]:
    """The header line naming the defaults a config took (none: no line)."""
    if not taken:
        return ()
    module = _MODULE.get(family, family)
    return (f"Not in the config, so the {family} defaults of {DEFAULTS_SOURCE} "
            f"configuration_{module}.py: {', '.join(taken)}.",)
