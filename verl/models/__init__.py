"""Model-level patches for Hugging Face transformers models (sequence packing, Ulysses sequence parallelism)."""
