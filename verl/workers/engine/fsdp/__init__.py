"""The FSDP/FSDP2 + HF transformers training engine (strategies ``fsdp`` and ``fsdp2``)."""

from verl.workers.engine.fsdp.engine import FSDPEngine

__all__ = ["FSDPEngine"]
