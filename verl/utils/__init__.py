"""Utilities shared by workers and trainers (device, fs, tokenizer, datasets, torch helpers, tracking, ...)."""

from verl.utils.config import omega_conf_to_dataclass


def __getattr__(name):
    # hf_tokenizer/hf_processor pull in transformers: resolve lazily so `import verl.utils.x` stays light.
    if name in ("hf_tokenizer", "hf_processor"):
        from verl.utils import tokenizer

        return getattr(tokenizer, name)
    raise AttributeError(f"module 'verl.utils' has no attribute '{name}'")


__all__ = ["hf_tokenizer", "hf_processor", "omega_conf_to_dataclass"]
