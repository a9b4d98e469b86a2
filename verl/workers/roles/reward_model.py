"""The reward-model worker: one process of a sequence-scoring reward model (``reward_model`` section), wired to the
training engine ``reward_model.strategy`` names; and the re-tokenizing of its inputs with its own chat template."""

from __future__ import annotations

import torch
from omegaconf import DictConfig
from tensordict import TensorDict

from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.debug import DistProfilerExtension
from verl.utils.distributed import init_distributed
from verl.utils.import_utils import import_external_libs
from verl.utils.model import compute_position_id_with_mask
from verl.utils.torch_functional import postprocess_data
from verl.workers.config import RewardModelConfig
from verl.workers.config.batch_sizes import normalize_reward_model_micro_batch_size
from verl.workers.engine import get_engine_cls
from verl.workers.engine.pretrained import load_pretrained
from verl.workers.roles.base import role_profiler, typed_section
from verl.workers.roles.phases import compute_phase, reports_compute_time

__all__ = ["RewardModelWorker", "switch_chat_template"]


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


class RewardModelWorker(Worker, DistProfilerExtension):
    """One process of a sequence-scoring reward model (``reward_model`` section)."""

    def __init__(self, config: RewardModelConfig | DictConfig):
        Worker.__init__(self)
        self.config = config = typed_section(config, RewardModelConfig)
        init_distributed()
        self.micro_batch_size = normalize_reward_model_micro_batch_size(config, torch.distributed.get_world_size())
        DistProfilerExtension.__init__(self, role_profiler(self, config.profiler, role="reward_model"))
        self.engine = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        """Load the reward model (token classification with one label; the score is read at the last token)."""
        from verl.utils.fs import copy_to_local
        from verl.utils.tokenizer import hf_tokenizer

        model_cfg = self.config.model
        import_external_libs(model_cfg.external_lib)
        trust = model_cfg.trust_remote_code
        files = load_pretrained(model_cfg.path, use_shm=model_cfg.use_shm, trust_remote_code=trust, num_labels=1)
        self.tokenizer = files.tokenizer
        self.input_tokenizer = None
        if model_cfg.input_tokenizer:
            input_tokenizer = hf_tokenizer(copy_to_local(model_cfg.input_tokenizer), trust_remote_code=trust)
            # re-tokenizing with the reward model's chat template is only needed when the two tokenizers differ
            same = input_tokenizer.get_vocab() == self.tokenizer.get_vocab() and (
                input_tokenizer.chat_template == self.tokenizer.chat_template
            )
            self.input_tokenizer = None if same else input_tokenizer
        files.hf_config.classifier_dropout = 0.0
        engine_cls = get_engine_cls(self.config.strategy, "reward_model.strategy")
        self.engine = engine_cls.build("reward_model", self.config, files)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    @reports_compute_time
    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``rm_scores`` ``(bs, response_length)``: the model's score at the last valid token, zeros elsewhere."""
        if self.input_tokenizer is not None:
            inputs = switch_chat_template(data, self.input_tokenizer, self.tokenizer, self.config)
        else:
            inputs = data.batch
        meta_info = {
            "micro_batch_size": self.micro_batch_size or len(data),
            "use_dynamic_bsz": self.config.use_dynamic_bsz,
            "max_token_len": self.config.forward_max_token_len_per_gpu,
        }
        scores = self.engine.infer(DataProto(batch=inputs, meta_info=meta_info))["scores"]
        response_length = data.batch["responses"].shape[-1]
        attention_mask = data.batch["attention_mask"]
        position_ids = data.batch["position_ids"]
        last = torch.argmax(position_ids * attention_mask, dim=-1)
        token_level = torch.zeros_like(attention_mask, dtype=scores.dtype)
        token_level[torch.arange(len(data)), last] = scores
        return DataProto.from_dict({"rm_scores": token_level[:, -response_length:]}).to("cpu")
