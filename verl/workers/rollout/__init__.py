"""Rollout (generation) engines. vLLM and SGLang live in their own subpackages and import lazily."""

from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout
from verl.workers.rollout.naive import NaiveRollout

__all__ = ["BaseRollout", "HFRollout", "NaiveRollout"]
