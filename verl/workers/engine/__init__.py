"""Training engines: one model (policy, value or reward model) with its optimizer, behind one interface per backend.

``get_engine_cls(strategy)`` gives the engine a role's ``strategy`` names; FSDP/FSDP2 is in ``engine.fsdp``.
"""

from verl.workers.engine.base import LossFn, TrainingEngine
from verl.workers.engine.registry import get_engine_cls, register_engine

__all__ = ["LossFn", "TrainingEngine", "get_engine_cls", "register_engine"]
