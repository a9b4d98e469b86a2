"""The rollout interface shared by every generation engine (HF, naive, vLLM, SGLang)."""

from abc import ABC, abstractmethod

from verl.protocol import DataProto

__all__ = ["BaseRollout"]


class BaseRollout(ABC):
    """A generation engine: left-padded prompts in, ``prompts/responses/input_ids/attention_mask/position_ids`` out."""

    @abstractmethod
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate responses for ``prompts`` (``input_ids``, ``attention_mask``, ``position_ids``: ``(B, P)``)."""
