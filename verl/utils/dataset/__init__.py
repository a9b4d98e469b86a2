"""Datasets for RL (prompts), SFT and reward-model training, plus their collate functions and samplers."""

from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn, create_rl_dataset, create_rl_sampler
from verl.utils.dataset.sampler import ResumableRandomSampler
from verl.utils.dataset.sft_dataset import SFTDataset

__all__ = [
    "RLHFDataset",
    "collate_fn",
    "create_rl_dataset",
    "create_rl_sampler",
    "ResumableRandomSampler",
    "SFTDataset",
    "MultiTurnSFTDataset",
]
