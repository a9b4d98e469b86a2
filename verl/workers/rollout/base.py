"""The rollout interface shared by every generation engine (HF, naive, vLLM, SGLang)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from verl.protocol import DataProto

__all__ = ["TRAJECTORY_ID", "TRAJECTORY_SINK", "BaseRollout", "SamplingRequest", "emit_trajectories"]

# meta_info keys with which a caller overrides the rollout config for one generate call
_PER_CALL_KEYS = ("do_sample", "temperature", "top_p", "top_k", "response_length")


# The reward loop's per-trajectory scoring (``reward_model.use_reward_loop`` with the agent loops or vLLM): the caller
# puts a sink in ``meta_info[TRAJECTORY_SINK]`` (anything with ``put(item)``: a ``queue.Queue`` in-process, a Ray
# ``Queue`` across processes) and gives each prompt the id of its first trajectory in the non-tensor column
# ``TRAJECTORY_ID`` (its ``n`` samples are that id + 0..n-1). The rollout puts ``(ids, rows)`` in the sink as
# trajectories finish, ``rows`` being exactly the rows its output will hold for them, so that scoring can start while
# the rest still generate.
TRAJECTORY_SINK = "reward_loop_sink"
TRAJECTORY_ID = "reward_loop_row"


def emit_trajectories(sink, first_ids, sample_index: int, rows: DataProto) -> None:
    """Hand finished trajectories to the caller's sink: ``rows`` are sample ``sample_index`` (and the samples after
    it, one row each) of the prompts whose first-trajectory ids are ``first_ids``."""
    first = np.asarray(first_ids, dtype=np.int64)
    per_prompt = len(rows) // max(1, len(first))
    ids = (first[:, None] + sample_index + np.arange(per_prompt)[None, :]).reshape(-1)
    rows.non_tensor_batch.pop(TRAJECTORY_ID, None)
    rows.meta_info = {}
    sink.put((ids, rows))


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
