"""Entry point: ``python -m verl.trainer.main_generation key=value ...`` (Hydra, config ``generation``).

Samples ``data.n_samples`` responses for every prompt of the parquet file ``data.path`` with a rollout-only worker
group (``ActorRolloutRefWorker(role="rollout")``, HF or vLLM) and writes the file again with a ``responses``
column (a list of ``n_samples`` strings per row) to ``data.output_path``. ``main_eval`` scores that file.
The config is checked here before Ray starts.
"""

from __future__ import annotations

import logging
import os

import hydra
import numpy as np
import pandas as pd
import ray
from omegaconf import DictConfig, OmegaConf, open_dict

from verl.protocol import DataProto, pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.config.checks.generation import check_generation_config
from verl.utils.model import compute_position_id_with_mask

logger = logging.getLogger(__name__)

__all__ = ["decode_responses", "generate_responses", "main", "run_generation", "tokenize_chats"]


@hydra.main(config_path="config", config_name="generation", version_base=None)
def main(config) -> None:
    run_generation(config)


def rollout_worker_config(config: DictConfig) -> DictConfig:
    """The ``model`` / ``rollout`` / ``actor`` sections that ``ActorRolloutRefWorker(role="rollout")`` reads.

    ``rollout.n`` is 1 (``generate_responses`` repeats prompts itself) and, unless set, a CPU vLLM engine's KV
    cache is sized for one call's sequences on a rank rather than ``max_num_seqs``.
    """
    sections = {key: OmegaConf.to_container(config[key], resolve=True) for key in ("model", "rollout", "actor")}
    worker = OmegaConf.create(sections)
    world_size = config.trainer.n_gpus_per_node * config.trainer.nnodes
    with open_dict(worker):
        worker.rollout.n = 1
        if worker.rollout.get("kv_cache_sequences") is None:
            worker.rollout.kv_cache_sequences = -(-config.data.batch_size * config.data.n_samples // world_size)
    return worker


def ray_init_kwargs(config: DictConfig) -> dict:
    """``ray.init`` arguments: on CPU enough logical CPUs for one process per worker and no dashboard."""
    on_cpu = config.trainer.device == "cpu"
    num_cpus = OmegaConf.select(config, "ray_init.num_cpus")
    world_size = config.trainer.n_gpus_per_node * config.trainer.nnodes
    if num_cpus is None and on_cpu:
        num_cpus = max(os.cpu_count() or 1, world_size)
    kwargs = {"num_cpus": num_cpus, "runtime_env": {"env_vars": {"TOKENIZERS_PARALLELISM": "true"}}}
    if on_cpu:
        kwargs["include_dashboard"] = False
    return kwargs


def tokenize_chats(tokenizer, chats: list, prompt_length: int) -> DataProto:
    """Chat-template ``chats`` (each a list of ``{"role", "content"}`` messages) into a left-padded prompt batch.

    Each prompt ends with the assistant's generation header; prompts longer than ``prompt_length`` tokens keep their
    last ``prompt_length`` tokens, so that header (what the model continues from) survives. Returns ``input_ids``,
    ``attention_mask``, ``position_ids`` ``(len(chats), P)`` with ``P <= prompt_length``.
    """
    texts = [tokenizer.apply_chat_template(list(chat), add_generation_prompt=True, tokenize=False) for chat in chats]
    padding_side, truncation_side = tokenizer.padding_side, tokenizer.truncation_side
    tokenizer.padding_side, tokenizer.truncation_side = "left", "left"
    try:
        encoded = tokenizer(
            texts,
            add_special_tokens=False,  # the chat template already wrote every special token it wants
            padding=True,
            truncation=True,
            max_length=prompt_length,
            return_tensors="pt",
        )
    finally:
        tokenizer.padding_side, tokenizer.truncation_side = padding_side, truncation_side
    attention_mask = encoded["attention_mask"]
    return DataProto.from_dict(
        {
            "input_ids": encoded["input_ids"],
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
        }
    )


def decode_responses(tokenizer, output: DataProto) -> list[str]:
    """The valid part of every row's ``responses`` (up to and including EOS), decoded without special tokens."""
    prompt_length = output.batch["prompts"].shape[-1]
    lengths = output.batch["attention_mask"][:, prompt_length:].sum(-1).tolist()
    responses = output.batch["responses"]
    return [tokenizer.decode(responses[i, : int(n)], skip_special_tokens=True) for i, n in enumerate(lengths)]


def generate_responses(worker_group, tokenizer, chats: list, config) -> list[list[str]]:
    """``data.n_samples`` decoded responses for each chat, batch by batch (``data.batch_size`` prompts a call).

    Every prompt is repeated ``n_samples`` times within its call: the rows of one call draw different samples, while
    repeated calls of the same step would replay the worker's seeded sampling stream.
    """
    n_samples, batch_size = config.data.n_samples, config.data.batch_size
    prompt_length = config.rollout.prompt_length
    results: list[list[str]] = []
    num_batches = -(-len(chats) // batch_size)
    for batch_idx in range(num_batches):
        batch_chats = chats[batch_idx * batch_size : (batch_idx + 1) * batch_size]
        prompts = tokenize_chats(tokenizer, batch_chats, prompt_length).repeat(n_samples, interleave=True)
        # the step number seeds the worker's sampling: distinct per batch, reproducible per run
        prompts.meta_info["global_steps"] = batch_idx
        padded, pad_size = pad_dataproto_to_divisor(prompts, worker_group.world_size)
        output = unpad_dataproto(worker_group.generate_sequences(padded), pad_size)
        texts = decode_responses(tokenizer, output)
        results.extend(texts[i * n_samples : (i + 1) * n_samples] for i in range(len(batch_chats)))
        print(f"[{batch_idx + 1}/{num_batches}] generated {len(texts)} responses")
    return results


def _chats(dataset: pd.DataFrame, prompt_key: str) -> list:
    """The prompt column as lists of message dicts (parquet gives numpy arrays of dicts)."""
    chats = []
    for value in dataset[prompt_key]:
        chats.append(value.tolist() if isinstance(value, np.ndarray) else list(value))
    return chats


def _worker_group(config, worker_config: DictConfig, worker_group_cls):
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    device = config.trainer.device
    pool = RayResourcePool(
        process_on_nodes=[config.trainer.n_gpus_per_node] * config.trainer.nnodes,
        use_gpu=device != "cpu",
        max_colocate_count=1,
    )
    worker_cls = RayClassWithInitArgs(cls=ray.remote(ActorRolloutRefWorker), config=worker_config, role="rollout")
    return (worker_group_cls or RayWorkerGroup)(resource_pool=pool, ray_cls_with_init=worker_cls, device_name=device)


def run_generation(config, worker_group_cls=None) -> pd.DataFrame:
    """Validate ``config``, generate, write ``data.output_path``; returns the written table.

    ``worker_group_cls`` replaces ``RayWorkerGroup`` (``InProcessWorkerGroup`` runs one worker in this process, no
    Ray: how the tests and a debugger use it).
    """
    check_generation_config(config)  # resolves trainer.device too
    OmegaConf.resolve(config)
    from verl.utils.fs import copy_to_local
    from verl.utils.tokenizer import hf_tokenizer

    local_model = copy_to_local(config.model.path)
    trust_remote_code = bool(OmegaConf.select(config, "model.trust_remote_code", default=False))
    tokenizer = hf_tokenizer(local_model, trust_remote_code=trust_remote_code)
    dataset = pd.read_parquet(copy_to_local(config.data.path))
    chats = _chats(dataset, config.data.prompt_key)

    if worker_group_cls is None and not ray.is_initialized():
        ray.init(**ray_init_kwargs(config))
    worker_group = _worker_group(config, rollout_worker_config(config), worker_group_cls)
    worker_group.init_model()
    responses = generate_responses(worker_group, tokenizer, chats, config)

    dataset["responses"] = responses
    output_path = os.path.expanduser(config.data.output_path)
    from verl.utils import hdfs_io

    output_dir = os.path.dirname(output_path)
    if output_dir:
        hdfs_io.makedirs(output_dir, exist_ok=True)
    dataset.to_parquet(output_path)
    print(f"wrote {len(dataset)} rows x {config.data.n_samples} responses to {output_path}")
    timeline = OmegaConf.select(config, "ray_init.timeline_json_file")
    if timeline and ray.is_initialized():
        ray.timeline(filename=timeline)
    return dataset


if __name__ == "__main__":
    from verl.utils.hydra_overrides import run_hydra_entry

    run_hydra_entry(main)  # verl's `+key=value` for keys this YAML has
