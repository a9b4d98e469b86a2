"""The rollout interface shared by every generation engine (HF, naive, vLLM, SGLang)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from verl.protocol import DataProto

__all__ = ["BaseRollout", "SamplingRequest"]

# meta_info keys with which a caller overrides the rollout config for one generate call
_PER_CALL_KEYS = ("do_sample", "temperature", "top_p", "top_k", "response_length")


class BaseRollout(ABC):
    """A generation engine: left-padded prompts in, ``prompts/responses/input_ids/attention_mask/position_ids`` out."""

    @abstractmethod
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate responses for ``prompts`` (``input_ids``, ``attention_mask``, ``position_ids``: ``(B, P)``)."""


@dataclass(frozen=True)
class SamplingRequest:
    """How one generate call samples, the same for every engine.

    The rollout config, overridden by the batch's ``meta_info`` (``do_sample``, ``temperature``, ``top_p``,
    ``top_k``, ``response_length``); ``meta_info["validate"]`` with sampling on takes ``val_kwargs`` and one sample
    per prompt (the trainer repeats validation prompts itself). Greedy (``do_sample=False`` or temperature 0)
    means one sample per prompt at temperature 0. ``top_k=-1`` means no top-k.
    """

    do_sample: bool
    temperature: float
    top_p: float
    top_k: int
    n: int
    response_length: int

    @classmethod
    def resolve(cls, meta: dict, config, **engine_defaults) -> SamplingRequest:
        """The request for a batch with ``meta`` under the ``actor_rollout_ref.rollout`` section ``config``.

        ``engine_defaults`` replace config values an engine has changed for a while (vLLM's
        ``update_sampling_params``); ``meta`` still has the last word.
        """
        values = {
            "do_sample": config.do_sample,
            "temperature": config.temperature,
            "top_p": config.top_p,
            "top_k": config.top_k,
            "n": config.n,
            "response_length": config.response_length,
        }
        values.update(engine_defaults)
        values.update({key: meta[key] for key in _PER_CALL_KEYS if key in meta})
        if meta.get("validate") and values["do_sample"]:
            val = config.val_kwargs
            values.update(temperature=val.temperature, top_p=val.top_p, top_k=val.top_k, n=1)
        if not values["do_sample"] or values["temperature"] <= 0:
            values.update(do_sample=False, temperature=0.0, top_p=1.0, top_k=-1, n=1)
        return cls(**values)
