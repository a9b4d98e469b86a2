"""Adapters over third-party inference engines, at verl's import paths (``verl.third_party.vllm``)."""
