"""Trainer-side validation (val-core / val-aux metrics per data source) and generation dumps."""

from __future__ import annotations

import json
import logging
import os
from collections import defaultdict

import numpy as np

from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.ppo.metric_utils import process_validation_metrics

logger = logging.getLogger(__name__)


def dump_generations(dump_path: str, step: int, inputs, outputs, scores, reward_extra_infos: dict) -> str:
    """Write ``{dump_path}/{step}.jsonl``: one JSON object per sample (input, output, score, step, extra infos)."""
    os.makedirs(dump_path, exist_ok=True)
    path = os.path.join(dump_path, f"{step}.jsonl")
    n = len(inputs)
    extras = {k: v for k, v in reward_extra_infos.items() if len(v) == n}
    with open(path, "w") as f:
        for i in range(n):
            row = {"input": inputs[i], "output": outputs[i], "score": scores[i], "step": step}
            row.update({k: _plain(v[i]) for k, v in extras.items()})
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


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


class _NullReporter:
    """Stands in when run reports are switched off (``trainer.run_report=False``)."""

    def on_step(self, step, metrics):
        pass

    def on_validation(self, step, metrics):
        pass

    def finish(self):
        pass


class ValidationMixin:
    """``_validate`` and the generation dumps for :class:`RayPPOTrainer`."""

    def _decode(self, ids) -> list[str]:
        return self.tokenizer.batch_decode(ids, skip_special_tokens=True)

    def _validate(self) -> dict:
        """Generate for the whole validation set with ``val_kwargs`` and score it with ``val_reward_fn``."""
        rollout_cfg = self.config.actor_rollout_ref.rollout
        sample_inputs, sample_outputs, sample_scores = [], [], []
        data_sources = []
        infos: dict[str, list] = defaultdict(list)
        for batch_dict in self.val_dataloader:
            test_batch = DataProto.from_single_dict(batch_dict).repeat(rollout_cfg.val_kwargs.n, interleave=True)
            reward_model = test_batch.non_tensor_batch.get("reward_model", None)
            if self.config.reward_model.enable and reward_model is not None and reward_model[0].get("style") == "model":
                return {}  # model-based rewards are not validated (as in verl)
            sample_inputs.extend(self._decode(test_batch.batch["input_ids"]))
            gen_batch = self._pop_generation_inputs(test_batch)
            gen_batch.meta_info = {
                "eos_token_id": self.tokenizer.eos_token_id,
                "pad_token_id": self.tokenizer.pad_token_id,
                "recompute_log_prob": False,
                "do_sample": rollout_cfg.val_kwargs.do_sample,
                "validate": True,
            }
            padded, pad_size = pad_dataproto_to_divisor(gen_batch, self.actor_rollout_wg.world_size)
            output = unpad_dataproto(self.actor_rollout_wg.generate_sequences(padded), pad_size=pad_size)
            sample_outputs.extend(self._decode(output.batch["responses"]))
            test_batch = test_batch.union(output)
            result = self.val_reward_fn(test_batch, return_dict=True)
            scores = result["reward_tensor"].sum(-1).tolist()
            sample_scores.extend(scores)
            infos["reward"].extend(scores)
            for key, values in result.get("reward_extra_info", {}).items():
                infos[key].extend(values)
            sources = test_batch.non_tensor_batch.get("data_source", np.array(["unknown"] * len(scores)))
            data_sources.extend(sources.tolist())

        self._maybe_log_val_generations(sample_inputs, sample_outputs, sample_scores)
        dump_dir = self.config.trainer.get("validation_data_dir", None)
        if dump_dir:
            dump_generations(dump_dir, self.global_steps, sample_inputs, sample_outputs, sample_scores, infos)
        for key, values in infos.items():
            assert len(values) in (0, len(sample_scores)), (
                f"reward_extra_info[{key!r}] has {len(values)} values for {len(sample_scores)} samples"
            )
        infos = {k: v for k, v in infos.items() if len(v) == len(sample_scores)}
        return name_validation_metrics(process_validation_metrics(data_sources, sample_inputs, infos))

    def _maybe_log_val_generations(self, inputs, outputs, scores) -> None:
        count = self.config.trainer.get("log_val_generations", 0)
        if not count:
            return
        samples = sorted(zip(inputs, outputs, scores), key=lambda x: x[0])
        rng = np.random.RandomState(42)
        rng.shuffle(samples)
        self.validation_generations_logger.log(self.config.trainer.logger, samples[:count], self.global_steps)

    def _dump_rollout(self, batch: DataProto) -> None:
        """Write this step's training samples to ``trainer.rollout_data_dir``."""
        extras = {
            k: v.tolist()
            for k, v in batch.non_tensor_batch.items()
            if k not in ("uid", "raw_prompt_ids", "raw_prompt") and isinstance(v, np.ndarray) and v.ndim == 1
        }
        dump_generations(
            self.config.trainer.rollout_data_dir,
            self.global_steps,
            self._decode(batch.batch["prompts"]),
            self._decode(batch.batch["responses"]),
            batch.batch["token_level_scores"].sum(-1).tolist(),
            extras,
        )

    def _make_reporter(self):
        """Progress bar, learning curve and Markdown report in the experiment folder (``trainer.run_report``)."""
        if not self.config.trainer.get("run_report", True):
            return _NullReporter()
        try:
            from verl.utils.run_report import RunReporter
        except ImportError:
            return _NullReporter()
        out_dir = self.config.trainer.get("report_dir", None) or self._checkpoint_root()
        return RunReporter(out_dir, total_steps=self.total_training_steps, initial_step=self.global_steps)
