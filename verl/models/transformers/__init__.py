"""Patches applied to Hugging Face transformers models; see :mod:`verl.models.transformers.monkey_patch`."""
