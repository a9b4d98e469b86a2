"""Token-by-token sampling with full forward passes (no KV cache): slow, simple, engine-independent."""

from __future__ import annotations

import torch
import torch.nn as nn
from omegaconf import DictConfig

from verl.protocol import DataProto
from verl.workers.config import RolloutConfig
from verl.workers.rollout.base import BaseRollout, SamplingRequest
from verl.workers.rollout.hf_rollout import build_rollout_output

__all__ = ["NaiveRollout"]


class NaiveRollout(BaseRollout):
    """Sample ``response_length`` tokens per prompt with temperature and top-k; one sample per prompt.

    ``config``: the rollout section (``response_length``, ``temperature``, ``top_k``, ``do_sample``).
    Rows that emitted EOS keep generating internally but their later tokens are replaced by ``pad_token_id``.
    """

    def __init__(self, module: nn.Module, config: RolloutConfig | DictConfig):
        super().__init__()
        self.module = module
        self.config = RolloutConfig.from_config(config)

    @torch.no_grad()
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Sample responses for left-padded prompts ``(B, P)``; meta_info needs ``eos_token_id``, ``pad_token_id``."""
        meta = prompts.meta_info
        eos_token_id, pad_token_id = meta["eos_token_id"], meta["pad_token_id"]
        eos = torch.as_tensor(eos_token_id if isinstance(eos_token_id, list | tuple) else [eos_token_id])
        request = SamplingRequest.resolve(meta, self.config)
        response_length, do_sample = request.response_length, request.do_sample
        temperature, top_k = request.temperature, request.top_k

        prompt_ids = prompts.batch["input_ids"]
        prompt_mask = prompts.batch["attention_mask"]
        prompt_pos = prompts.batch["position_ids"]
        device = next(self.module.parameters()).device
        ids, mask, pos = prompt_ids.to(device), prompt_mask.to(device), prompt_pos.to(device)
        finished = torch.zeros(ids.size(0), dtype=torch.bool, device=device)
        eos = eos.to(device)
        was_training = self.module.training
        self.module.eval()
        new_tokens = []
        for _ in range(response_length):
            logits = self.module(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits[:, -1]
            if do_sample and temperature > 0:
                logits = logits / temperature
                if top_k > 0:
                    kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                token = torch.multinomial(torch.softmax(logits.float(), dim=-1), 1).squeeze(-1)
            else:
                token = logits.argmax(dim=-1)
            alive = ~finished
            token = torch.where(alive, token, torch.full_like(token, pad_token_id))
            new_tokens.append(token)
            # A row stays in the mask through its first EOS; pad may equal EOS, so track liveness, not tokens.
            finished = finished | (alive & torch.isin(token, eos))
            ids = torch.cat([ids, token[:, None]], dim=1)
            mask = torch.cat([mask, alive.to(mask.dtype)[:, None]], dim=1)
            pos = torch.cat([pos, pos[:, -1:] + 1], dim=1)
        if was_training:
            self.module.train()
        responses = torch.stack(new_tokens, dim=1).to(prompt_ids.device)
        return DataProto(batch=build_rollout_output(prompt_ids, prompt_mask, prompt_pos, responses, eos_token_id))
