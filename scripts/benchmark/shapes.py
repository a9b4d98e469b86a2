"""Real architectures' shapes for benchmarks (random weights, real layer sizes), in ``make_tiny_model_dir``'s
keywords; ``hf_config_kwargs`` gives the same shape in Hugging Face config names."""

from __future__ import annotations

# SmolLM2-135M: llama, tied embeddings, GQA 9/3 heads, vocabulary 49152
SMOLLM2_135M = dict(
    model_type="llama",
    hidden_size=576,
    num_layers=30,
    num_heads=9,
    num_kv_heads=3,
    intermediate_size=1536,
    vocab_size=49152,
    tie_word_embeddings=True,
)

_HF_NAMES = {
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
}


def hf_config_kwargs(shape: dict) -> dict:
    """``shape`` with Hugging Face's config key names (``AutoConfig.for_model(**...)``)."""
    return {_HF_NAMES.get(key, key): value for key, value in shape.items()}
