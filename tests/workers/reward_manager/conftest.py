"""Builders for reward-manager test batches (byte-level shipped tokenizer: one byte = one token)."""

import numpy as np
import pytest
import torch

from verl import DataProto
from verl.demo.tiny_model import shipped_tokenizer_path
from verl.utils.tokenizer import hf_tokenizer

PAD = 256


@pytest.fixture(scope="session")
def tokenizer():
    return hf_tokenizer(shipped_tokenizer_path())


@pytest.fixture
def make_batch(tokenizer):
    def build(prompts, responses, ground_truths, data_sources=None, prompt_len=8, response_len=12, eos=False):
        """Left-padded prompts and right-padded responses; ``eos`` appends the eos token to each response."""
        bs = len(prompts)
        prompt_ids = torch.full((bs, prompt_len), PAD)
        response_ids = torch.full((bs, response_len), PAD)
        mask = torch.zeros(bs, prompt_len + response_len, dtype=torch.long)
        for i, (p, r) in enumerate(zip(prompts, responses)):
            p_ids = tokenizer.encode(p, add_special_tokens=False)[-prompt_len:]
            r_ids = (tokenizer.encode(r, add_special_tokens=False) + ([tokenizer.eos_token_id] if eos else []))[
                :response_len
            ]
            prompt_ids[i, prompt_len - len(p_ids) :] = torch.tensor(p_ids)
            response_ids[i, : len(r_ids)] = torch.tensor(r_ids)
            mask[i, prompt_len - len(p_ids) : prompt_len] = 1
            mask[i, prompt_len : prompt_len + len(r_ids)] = 1
        return DataProto.from_dict(
            tensors={
                "prompts": prompt_ids,
                "responses": response_ids,
                "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
                "attention_mask": mask,
            },
            non_tensors={
                "data_source": np.array(data_sources or ["openai/gsm8k"] * bs, dtype=object),
                "reward_model": np.array([{"style": "rule", "ground_truth": g} for g in ground_truths], dtype=object),
                "extra_info": np.array([{"index": i} for i in range(bs)], dtype=object),
            },
        )

    return build
