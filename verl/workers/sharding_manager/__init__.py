"""Sharding managers: context managers that move a worker between its training and inference layouts.

Only the base and the Ulysses manager are imported here; the inference-engine managers (``fsdp_vllm``,
``fsdp_sglang``) import their engines and must be imported explicitly, and only where the engine is installed.
"""

from verl.workers.sharding_manager.base import BaseShardingManager
from verl.workers.sharding_manager.fsdp_ulysses import FSDPUlyssesShardingManager

__all__ = ["BaseShardingManager", "FSDPUlyssesShardingManager"]
