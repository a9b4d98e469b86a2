"""Inputs and forward pass of a sequence-scoring reward model."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl import DataProto
from verl.utils.model import compute_position_id_with_mask
from verl.utils.torch_functional import postprocess_data
from verl.workers.config import RewardModelConfig


def switch_chat_template(data: DataProto, src_tokenizer, rm_tokenizer, config: RewardModelConfig) -> TensorDict:
    """Re-tokenize (prompt, response) with the reward model's own chat template ("template switch").

    Needs ``non_tensor_batch["raw_prompt"]`` (the chat messages; set ``data.return_raw_chat=True``).
    """
    if "raw_prompt" not in data.non_tensor_batch:
        raise KeyError(
            "reward_model.model.input_tokenizer differs from the reward model's tokenizer, which needs the raw chat "
            "prompt: set data.return_raw_chat=True"
        )
    responses = data.batch["responses"]
    response_length = responses.shape[-1]
    valid_lengths = data.batch["attention_mask"][:, -response_length:].sum(-1)
    max_length = config.max_length or data.batch["input_ids"].shape[-1]
    truncation = config.truncation
    ids, masks = [], []
    for i in range(len(data)):
        text = src_tokenizer.decode(responses[i][: valid_lengths[i]].tolist())
        if src_tokenizer.eos_token:
            text = text.replace(src_tokenizer.eos_token, "")
        chat = list(data.non_tensor_batch["raw_prompt"][i]) + [{"role": "assistant", "content": text}]
        prompt = rm_tokenizer.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
        encoded = rm_tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        input_ids, attention_mask = postprocess_data(
            encoded["input_ids"],
            encoded["attention_mask"],
            max_length=max_length,
            pad_token_id=rm_tokenizer.pad_token_id,
            left_pad=False,
            truncation=truncation,
        )
        ids.append(input_ids)
        masks.append(attention_mask)
    input_ids, attention_mask = torch.cat(ids), torch.cat(masks)
    return TensorDict(
        {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
        },
        batch_size=[len(data)],
    )
