"""The multi-turn SFT dataset with its loss mask aligned to the SFT trainer's next-token convention.

``MultiTurnSFTDataset`` marks the assistant tokens themselves (``loss_mask[t] = 1`` when token ``t`` is an
assistant token), while ``fsdp_sft_trainer`` counts position ``t`` when ``loss_mask[t] == 1`` and trains it to
predict token ``t + 1``. Used together, the first token of every assistant turn is never a target (so the model
never learns to open a turn with ``<tool_call>``) and the token after each turn is one. This class shifts the mask
one position left so that exactly the assistant tokens are the targets. Selected with
``data.custom_cls.path=recipe/calc_tool/sft_dataset.py data.custom_cls.name=CalcToolSFTDataset``.
"""

from __future__ import annotations

import torch

from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

__all__ = ["CalcToolSFTDataset"]


class CalcToolSFTDataset(MultiTurnSFTDataset):
    """MultiTurnSFTDataset whose ``loss_mask[t]`` is 1 when token ``t + 1`` belongs to an assistant turn."""

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        """The base item with ``loss_mask`` (``(max_length,)``) moved one position left."""
        out = super().__getitem__(item)
        mask = out["loss_mask"]
        out["loss_mask"] = torch.cat([mask[1:], mask.new_zeros(1)])
        return out
