"""Trainer-side validation (val-core / val-aux metrics per data source) and generation dumps."""

from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np

from verl import DataProto
from verl.multi_turn.rollout import ROW_CONTEXT_KEYS
from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.config import PPOConfig
from verl.trainer.ppo.metric_utils import process_validation_metrics
from verl.trainer.report.generation_dump import dump_generations, rollout_generations, select_val_generations

logger = logging.getLogger(__name__)


def name_validation_metrics(per_source: dict) -> dict[str, float]:
    """Flatten ``{source: {var: {metric: value}}}`` into ``val-core/...`` and ``val-aux/...`` keys.

    Per source the core variable is ``acc`` if reported, else ``reward``; its mean/maj/best metrics at the largest
    ``@N`` are ``val-core``, everything else ``val-aux``.
    """
    metrics = {}
    for source, variables in per_source.items():
        core_var = "acc" if "acc" in variables else "reward"
        for var_name, var_metrics in variables.items():
            sizes = [int(name.split("@")[1].split("/")[0]) for name in var_metrics if "@" in name]
            n_max = max(sizes, default=1)
            for metric_name, value in var_metrics.items():
                is_core = (
                    var_name == core_var
                    and metric_name.startswith(("mean", "maj", "best"))
                    and f"@{n_max}" in metric_name
                )
                section = "val-core" if is_core else "val-aux"
                metrics[f"{section}/{source}/{var_name}/{metric_name}"] = value
    return metrics


def pop_generation_inputs(batch: DataProto, row_context: bool = False) -> DataProto:
    """Pop what the rollout needs from a prompt batch: the prompt tensors and the optional per-prompt values.

    ``row_context`` (agent loops): the row's other columns (``data_source``, ``extra_info``, ``reward_model``, ...)
    are lent too, not popped, so that a loop sees the whole row; ``meta_info["row_context_keys"]`` names them and the
    rollout leaves them out of its output (the batch keeps its own).
    """
    optional = ("multi_modal_data", "raw_prompt", "tools_kwargs", "interaction_kwargs", "agent_name")
    non_tensor_keys = ["raw_prompt_ids"] if "raw_prompt_ids" in batch.non_tensor_batch else []
    non_tensor_keys += [k for k in optional if k in batch.non_tensor_batch]
    gen = batch.pop(batch_keys=["input_ids", "attention_mask", "position_ids"], non_tensor_batch_keys=non_tensor_keys)
    if "generation_chunk" in batch.meta_info:  # the reward loop's chunk index: each chunk samples with its own seed
        gen.meta_info["generation_chunk"] = batch.meta_info["generation_chunk"]
    if "multi_modal_inputs" in batch.non_tensor_batch:
        # lent, not popped: the HF rollout generates from these tensors, and log-prob and update need them after
        gen.non_tensor_batch["multi_modal_inputs"] = batch.non_tensor_batch["multi_modal_inputs"]
    if row_context:
        lent = sorted(set(batch.non_tensor_batch) - set(gen.non_tensor_batch))
        gen.non_tensor_batch.update({key: batch.non_tensor_batch[key] for key in lent})
        gen.meta_info = {**gen.meta_info, ROW_CONTEXT_KEYS: lent}
    return gen


def keep_generation_inputs(batch: DataProto, gen_batch: DataProto, gen_output: DataProto) -> None:
    """Give ``batch`` back the per-prompt values popped into ``gen_batch`` that the rollout did not hand back in
    ``gen_output`` (the HF rollout returns tensors only), e.g. ``raw_prompt`` for a reward model that re-applies its
    own chat template; ``raw_prompt_ids`` stay popped."""
    for key, value in gen_batch.non_tensor_batch.items():
        if key not in gen_output.non_tensor_batch and key != "raw_prompt_ids":
            batch.non_tensor_batch[key] = value


class Validator:
    """Generates for the whole validation set with ``rollout.val_kwargs``, scores it with ``val_reward_fn``, and
    reports val-core / val-aux metrics per data source (with optional generation logs and dumps)."""

    def __init__(self, config: PPOConfig, tokenizer, val_dataloader, val_reward_fn) -> None:
        from verl.utils.tracking import ValidationGenerationsLogger

        self.config = config
        self.tokenizer = tokenizer
        self.val_dataloader = val_dataloader
        self.val_reward_fn = val_reward_fn
        self.generations_logger = ValidationGenerationsLogger()

    def _decode(self, ids) -> list[str]:
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)

    def validate(self, actor_rollout_wg, global_step: int) -> dict:
        """The validation metrics at ``global_step`` ({} when the rewards are model-based, as in verl)."""
        val_kwargs = self.config.actor_rollout_ref.rollout.val_kwargs
        sample_inputs, sample_outputs, sample_scores = [], [], []
        data_sources = []
        infos: dict[str, list] = defaultdict(list)
        for batch_dict in self.val_dataloader:
            test_batch = DataProto.from_single_dict(batch_dict).repeat(val_kwargs.n, interleave=True)
            reward_model = test_batch.non_tensor_batch.get("reward_model", None)
            if self.config.reward_model.enable and reward_model is not None and reward_model[0].get("style") == "model":
                return {}
            sample_inputs.extend(self._decode(test_batch.batch["input_ids"]))
            gen_batch = pop_generation_inputs(test_batch, self.config.actor_rollout_ref.rollout.uses_agent_loops)
            gen_batch.meta_info.update(
                {
                    "eos_token_id": self.tokenizer.eos_token_id,
                    "pad_token_id": self.tokenizer.pad_token_id,
                    "recompute_log_prob": False,
                    "do_sample": val_kwargs.do_sample,
                    "validate": True,
                }
            )
            padded, pad_size = pad_dataproto_to_divisor(gen_batch, actor_rollout_wg.world_size)
            output = unpad_dataproto(actor_rollout_wg.generate_sequences(padded), pad_size=pad_size)
            sample_outputs.extend(self._decode(output.batch["responses"]))
            keep_generation_inputs(test_batch, gen_batch, output)
            test_batch = test_batch.union(output)
            result = self.val_reward_fn(test_batch, return_dict=True)
            scores = result["reward_tensor"].sum(-1).tolist()
            sample_scores.extend(scores)
            infos["reward"].extend(scores)
            for key, values in result.get("reward_extra_info", {}).items():
                infos[key].extend(values)
            sources = test_batch.non_tensor_batch.get("data_source", np.array(["unknown"] * len(scores)))
            data_sources.extend(sources.tolist())

        trainer = self.config.trainer
        if trainer.log_val_generations > 0:
            samples = select_val_generations(sample_inputs, sample_outputs, sample_scores, trainer.log_val_generations)
            self.generations_logger.log(trainer.logger, samples, global_step)
        if trainer.validation_data_dir:
            extra = {k: v for k, v in infos.items() if k != "reward"}
            dump_generations(
                sample_inputs, sample_outputs, sample_scores, extra, trainer.validation_data_dir, global_step
            )
        for key, values in infos.items():
            assert len(values) in (0, len(sample_scores)), (
                f"reward_extra_info[{key!r}] has {len(values)} values for {len(sample_scores)} samples"
            )
        infos = {k: v for k, v in infos.items() if len(v) == len(sample_scores)}
        return name_validation_metrics(process_validation_metrics(data_sources, sample_inputs, infos))


def dump_rollout(batch: DataProto, reward_extra_keys, tokenizer, dump_dir: str, global_step: int) -> None:
    """Write a step's training samples (with their reward extra infos) to ``dump_dir/{global_step}.jsonl``."""
    inputs, outputs, scores = rollout_generations(batch, tokenizer)
    extra = {k: batch.non_tensor_batch[k].tolist() for k in reward_extra_keys if k in batch.non_tensor_batch}
    dump_generations(inputs, outputs, scores, extra, dump_dir, global_step)
