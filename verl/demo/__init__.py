"""The built-in demo: what ``python -m verl.trainer.main_ppo`` with no overrides trains, and the tiny models tests use.

* ``tiny_model``: seeded tiny random HF models (Qwen2 / Llama, or a family's shape) with the shipped tokenizer;
* ``model_families``: the config and tokenizer quirks of the families users train, scaled down;
* ``tiny_vlm``: a tiny random Qwen2.5-VL and a small Geometry3k-like data set;
* ``arithmetic_task``: the built-in verifiable task (two-number addition) as RL and SFT parquet files;
* ``assets``: ``builtin://`` paths to the shipped model and task files under ``verl/assets``.

``import verl`` imports none of these.
"""
