"""Supervised fine-tuning with FSDP, launched by torchrun (gloo on CPU, NCCL/HCCL on accelerators).

    torchrun --nproc_per_node=2 -m verl.trainer.fsdp_sft_trainer \\
        data.train_files=$HOME/data/gsm8k/train.parquet data.val_files=$HOME/data/gsm8k/test.parquet \\
        model.partial_pretrain=Qwen/Qwen2.5-0.5B-Instruct trainer.default_local_dir=$HOME/ckpt/sft

Next-token cross-entropy on the positions the dataset's ``loss_mask`` marks, with optional packing
(``use_remove_padding``), Ulysses sequence parallelism (``ulysses_sequence_parallel_size``) and LoRA. Every
``save_freq`` steps and at the end a Hugging Face model directory ``global_step_{N}`` is written.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import shutil
import warnings
from contextlib import contextmanager

import hydra
import torch
import torch.distributed as dist
import torch.nn.functional as F
from omegaconf import DictConfig
from torch.utils.data import DataLoader, DistributedSampler

from verl.trainer.config.sft import SFTConfig, SFTDataConfig
from verl.utils.device import get_device_name, is_accelerator_available
from verl.utils.distributed import destroy_global_process_group, initialize_global_process_group
from verl.utils.fsdp_utils import clip_grad_norm_, get_fsdp_full_state_dict, wrap_model_for_training
from verl.utils.torch_functional import get_cosine_schedule_with_warmup, get_wsd_schedule_with_warmup
from verl.utils.ulysses import (
    gather_outpus_and_unpad,
    get_ulysses_sequence_parallel_group,
    set_ulysses_sequence_parallel_group,
    ulysses_pad_and_slice_inputs,
)
from verl.workers.engine.fsdp.activation_checkpointing import ActivationCheckpointing
from verl.workers.engine.fsdp.hf_forward import (
    autocast_context,
    compute_device,
    pack_padded_inputs,
    packed_forward_kwargs,
)
from verl.workers.engine.fsdp.setup import cpu_fused_adamw

logger = logging.getLogger(__name__)

__all__ = ["FSDPSFTTrainer", "create_sft_dataset", "extract_step", "main", "run_sft", "validate_sft_config"]


def extract_step(path: str) -> int | None:
    """The N of a ``.../global_step_N`` checkpoint path (None when the path has none)."""
    match = re.search(r"global_step_(\d+)", str(path))
    return int(match.group(1)) if match else None


def validate_sft_config(config: DictConfig | SFTConfig, world_size: int) -> SFTConfig:
    """The typed config, checked before anything heavy happens; errors name the key, the value and what is expected.

    Building the `SFTConfig` checks each section's values (types, strategy, scheduler, truncation, ...);
    `SFTConfig.check` adds the parallel layout, batch divisibility and data files for ``world_size`` ranks.
    """
    typed = SFTConfig.from_config(config)
    typed.check(world_size)
    return typed


def create_sft_dataset(data_paths, data_config, tokenizer):
    """The SFT dataset for ``data_paths``: ``data.custom_cls`` if set, else multi-turn or single-turn.

    The dataset class gets ``data_config`` as given (verl's custom classes read it like a mapping).
    """
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
    from verl.utils.dataset.sft_dataset import SFTDataset
    from verl.utils.import_utils import load_extern_type

    data = omega_conf_to_dataclass(data_config, SFTDataConfig, allow_extra=True, path="data")
    if data.custom_cls.path:
        dataset_cls = load_extern_type(data.custom_cls.path, data.custom_cls.name)
    elif data.multiturn.enable:
        dataset_cls = MultiTurnSFTDataset
    else:
        dataset_cls = SFTDataset
    return dataset_cls(parquet_files=data_paths, tokenizer=tokenizer, config=data_config)


# ------------------------------------------------------------------------------------------------------------
# LoRA checkpoint helpers
# ------------------------------------------------------------------------------------------------------------
_LORA_A = re.compile(r"^(?P<prefix>.+)\.lora_A\.(?P<adapter>[^.]+)\.weight$")
_PEFT_ROOT = "base_model.model."


def merge_lora_state_dict(state: dict[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """A plain HF state dict from a PEFT LoRA one: ``W + scaling * B @ A`` for every adapted linear layer."""
    merged: dict[str, torch.Tensor] = {}
    adapted = {}
    for key in state:
        match = _LORA_A.match(key)
        if match:
            adapted[match["prefix"]] = match["adapter"]
    for key, value in state.items():
        if "lora_" in key:
            if not (_LORA_A.match(key) or re.search(r"\.lora_B\.[^.]+\.weight$", key)):
                raise ValueError(f"cannot merge LoRA parameter {key!r} (only linear-layer adapters are supported)")
            continue
        name = key.removeprefix(_PEFT_ROOT)
        prefix = key.rsplit(".base_layer.", 1)[0] if ".base_layer." in key else None
        if prefix is not None:
            name = name.replace(".base_layer.", ".")
            if key.endswith(".base_layer.weight") and prefix in adapted:
                adapter = adapted[prefix]
                lora_a = state[f"{prefix}.lora_A.{adapter}.weight"].float()
                lora_b = state[f"{prefix}.lora_B.{adapter}.weight"].float()
                value = (value.float() + scaling * (lora_b @ lora_a)).to(value.dtype)
        merged[name] = value
    return merged


def lora_adapter_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter tensors of a PEFT state dict under PEFT's saved names (adapter name dropped)."""
    out = {}
    for key, value in state.items():
        if "lora_" in key:
            out[re.sub(r"\.(lora_[AB])\.[^.]+\.weight$", r".\1.weight", key)] = value.contiguous()
    return out


# ------------------------------------------------------------------------------------------------------------
# the trainer
# ------------------------------------------------------------------------------------------------------------
class FSDPSFTTrainer:
    """SFT over an FSDP-sharded causal LM; ``fit()`` trains, validates and saves checkpoints.

    device_mesh: 1-D ``("fsdp",)`` over all ranks (sharding); ulysses_device_mesh: ``("dp", "sp")``, the ranks of
    one ``sp`` row see the same samples and split each packed sequence between them. ``config`` (the composed
    ``sft_trainer`` config or an `SFTConfig`) is kept as ``self.config``, a private typed copy whose
    ``data.train_batch_size`` becomes per data-parallel rank.
    """

    def __init__(
        self, config: DictConfig | SFTConfig, device_mesh, ulysses_device_mesh, tokenizer, train_dataset, val_dataset
    ):
        self.device_mesh = device_mesh
        self.ulysses_device_mesh = ulysses_device_mesh
        self.tokenizer = tokenizer
        self.world_size = device_mesh.size()
        self.config: SFTConfig = copy.deepcopy(validate_sft_config(config, self.world_size))
        self.sp_size = self.config.ulysses_sequence_parallel_size
        self.use_remove_padding = self.config.use_remove_padding
        self.dp_size = ulysses_device_mesh.size(0)
        self.dp_rank = ulysses_device_mesh.get_local_rank("dp")
        self.sp_group = ulysses_device_mesh["sp"].get_group() if self.sp_size > 1 else None
        self.dp_group = ulysses_device_mesh["dp"].get_group() if self.dp_size > 1 else None
        self.device = compute_device()
        self.is_lora = self.config.model.is_lora
        self._normalize_config_bsz()
        self._build_dataloader(train_dataset, val_dataset)
        self._build_model_optimizer()
        self.saved_paths: list[str] = []

    # -------------------------------------------------------------------------------------------------------
    # setup
    # -------------------------------------------------------------------------------------------------------
    def _normalize_config_bsz(self) -> None:
        """Make ``data.train_batch_size`` per data-parallel rank (validated to divide)."""
        if self.config.data.micro_batch_size is not None:
            warnings.warn("data.micro_batch_size is deprecated and ignored; use data.micro_batch_size_per_gpu")
        self.config.data.train_batch_size //= self.dp_size
        self.micro_batch_size = self.config.data.micro_batch_size_per_gpu

    def _build_dataloader(self, train_dataset, val_dataset) -> None:
        seed = self.config.trainer.seed
        self.train_dataset, self.val_dataset = train_dataset, val_dataset
        if len(train_dataset) < self.config.data.train_batch_size * self.dp_size:
            raise ValueError(
                f"the training set has {len(train_dataset)} samples, fewer than one global batch "
                f"(data.train_batch_size={self.config.data.train_batch_size * self.dp_size})"
            )
        # SP ranks of one group share the dp rank, hence the same samples.
        self.train_sampler = DistributedSampler(
            train_dataset, num_replicas=self.dp_size, rank=self.dp_rank, shuffle=True, seed=seed, drop_last=True
        )
        pin = is_accelerator_available()
        self.train_dataloader = DataLoader(
            train_dataset,
            batch_size=self.config.data.train_batch_size,
            sampler=self.train_sampler,
            num_workers=0,
            pin_memory=pin,
            drop_last=True,
        )
        self.val_dataloader = None
        if val_dataset is not None:
            self.val_sampler = DistributedSampler(
                val_dataset, num_replicas=self.dp_size, rank=self.dp_rank, shuffle=False, drop_last=True
            )
            self.val_dataloader = DataLoader(
                val_dataset,
                batch_size=self.micro_batch_size,
                sampler=self.val_sampler,
                num_workers=0,
                pin_memory=pin,
                drop_last=True,
            )

    def _build_model_optimizer(self) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM

        from verl.models.transformers.monkey_patch import apply_monkey_patch
        from verl.utils.fs import copy_to_local
        from verl.utils.import_utils import import_external_libs
        from verl.utils.torch_dtypes import PrecisionType
        from verl.workers.engine.fsdp.setup import apply_lora, load_hf_model

        model_cfg = self.config.model
        resume_path = self.config.trainer.resume_path
        source = resume_path or model_cfg.partial_pretrain
        local_path = copy_to_local(os.path.expanduser(source), verbose=True, use_shm=model_cfg.use_shm)
        import_external_libs(model_cfg.external_lib)
        trust_remote_code = model_cfg.trust_remote_code
        hf_config = AutoConfig.from_pretrained(local_path, trust_remote_code=trust_remote_code)
        # Sequences up to data.max_length must have rotary positions.
        hf_config.max_position_embeddings = max(
            getattr(hf_config, "max_position_embeddings", 0) or 0, self.config.data.max_length
        )
        if self.sp_size > 1:
            from verl.utils.ulysses import validate_ulysses_config

            validate_ulysses_config(hf_config.num_attention_heads, self.sp_size)
        fsdp_cfg = model_cfg.fsdp_config
        dtype = PrecisionType.to_dtype(fsdp_cfg.model_dtype or "fp32")
        model = load_hf_model(AutoModelForCausalLM, local_path, hf_config, dtype, trust_remote_code, self.device_mesh)
        self.hf_config = model.config
        self.generation_config = getattr(model, "generation_config", None)
        apply_monkey_patch(model, ulysses_sp_size=self.sp_size, use_remove_padding=self.use_remove_padding)
        if model_cfg.use_liger:
            from verl.models.transformers.liger import apply_liger_kernels

            apply_liger_kernels(model, "model.use_liger", fused_linear_cross_entropy=True)
        self.checkpointing = None
        if model_cfg.enable_gradient_checkpointing:
            self.checkpointing = ActivationCheckpointing(model_cfg.gradient_checkpointing_policy, self.device.type)
            self.checkpointing.enable(model)
        if self.is_lora:
            model = apply_lora(model, model_cfg)
            self.lora_scaling = model_cfg.lora_alpha / model_cfg.lora_rank
            self.peft_config = model.peft_config["default"]
        self.fsdp_model = wrap_model_for_training(
            model,
            strategy=model_cfg.strategy,
            device_mesh=self.device_mesh,
            fsdp_config={"wrap_policy": fsdp_cfg.wrap_policy},
            cpu_offload=fsdp_cfg.offload,
            is_lora=self.is_lora,
        )
        optim = self.config.optim
        params = [p for p in self.fsdp_model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=optim.lr, betas=tuple(optim.betas), weight_decay=optim.weight_decay, **cpu_fused_adamw(params)
        )
        self.steps_per_epoch = len(self.train_dataloader)
        trainer_cfg = self.config.trainer
        total = trainer_cfg.total_training_steps
        if total is None:  # total_epochs is then >= 1 (checked when the config was built)
            total = self.steps_per_epoch * trainer_cfg.total_epochs
        self.total_steps = total
        warmup = int(total * optim.warmup_steps_ratio)
        if optim.lr_scheduler == "wsd":
            self.lr_scheduler = get_wsd_schedule_with_warmup(self.optimizer, warmup, total)
        else:
            self.lr_scheduler = get_cosine_schedule_with_warmup(self.optimizer, warmup, total)
        # Resume is weights-only: the model comes from resume_path, the schedule is fast-forwarded, Adam restarts.
        self.start_step = (extract_step(resume_path) or 0) if resume_path else 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(self.start_step):
                self.lr_scheduler.step()

    # -------------------------------------------------------------------------------------------------------
    # loss
    # -------------------------------------------------------------------------------------------------------
    @contextmanager
    def _sequence_parallel(self):
        """Install this trainer's SP group for the attention patch (restored afterwards)."""
        previous = get_ulysses_sequence_parallel_group()
        set_ulysses_sequence_parallel_group(self.sp_group)
        try:
            yield
        finally:
            set_ulysses_sequence_parallel_group(previous)

    def _compute_loss_and_backward(self, batch: dict, do_backward: bool = True, n_micro_batches: int = 1):
        """Masked next-token cross-entropy of one micro batch, per valid token; backward of ``loss / n_micro``.

        batch: ``input_ids``, ``attention_mask``, ``position_ids``, ``loss_mask`` each ``(bs, seqlen)``.
        Position ``t`` predicts token ``t + 1`` and counts when ``loss_mask[t] == 1`` (the last position never does).
        Returns the micro batch's loss (a 0-d tensor, not divided by ``n_micro``).
        """
        input_ids = batch["input_ids"].to(self.device)
        attention_mask = batch["attention_mask"].to(self.device)
        position_ids = batch["position_ids"].to(self.device)
        loss_mask = batch["loss_mask"][:, :-1].to(self.device).float()
        if do_backward and self.checkpointing is not None:
            packed = -(-int(attention_mask.sum()) // self.sp_size)
            self.checkpointing.plan(packed if self.use_remove_padding else attention_mask.numel())
        with self._sequence_parallel(), autocast_context():
            if not self.use_remove_padding:
                logits = self.fsdp_model(
                    input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
                ).logits[:, :-1]
                labels = input_ids[:, 1:]
                token_loss = F.cross_entropy(logits.float().transpose(1, 2), labels, reduction="none")
                loss = (token_loss * loss_mask).sum()
            else:
                # Labels and weights are laid out on the padded grid first, so packing cannot pair a sequence's
                # last token with the next sequence's first one.
                labels = torch.roll(input_ids, shifts=-1, dims=1)
                weights = F.pad(loss_mask, (0, 1))
                ids_rmpad, pos_rmpad, valid = pack_padded_inputs(input_ids, attention_mask, position_ids)
                labels_rmpad, weights_rmpad = labels[valid].unsqueeze(0), weights[valid]
                pad = 0
                if self.sp_size > 1:
                    ids_rmpad, pos_rmpad, pad = ulysses_pad_and_slice_inputs(ids_rmpad, pos_rmpad, self.sp_size)
                    labels_rmpad, _, _ = ulysses_pad_and_slice_inputs(labels_rmpad, None, self.sp_size)
                kwargs = packed_forward_kwargs(
                    self.fsdp_model, pos_rmpad, torch.float32, sequence_parallel=self.sp_size > 1
                )
                logits = self.fsdp_model(input_ids=ids_rmpad, **kwargs).logits[0]
                token_loss = F.cross_entropy(logits.float(), labels_rmpad[0], reduction="none")
                if self.sp_size > 1:
                    token_loss = gather_outpus_and_unpad(token_loss, gather_dim=0, unpad_dim=0, padding_size=pad)
                loss = (token_loss * weights_rmpad).sum()
            valid_tokens = loss_mask.sum()
            scale = 1.0
            if self.config.data.balance_dp_token and self.dp_size > 1:
                dist.all_reduce(valid_tokens, group=self.dp_group)
                scale = float(self.dp_size)
            loss = loss / (valid_tokens + 1e-8) * scale
            if do_backward:
                (loss / n_micro_batches).backward()
        return loss

    def _all_reduce_mean(self, value: float) -> float:
        tensor = torch.tensor(value, dtype=torch.float32, device=self.device)
        dist.all_reduce(tensor)  # SUM: gloo has no AVG
        return tensor.item() / self.world_size

    def training_step(self, batch: dict) -> dict[str, float]:
        """One optimizer step over a per-rank batch ``(train_batch_size, seqlen)`` split into micro batches."""
        self.fsdp_model.train()
        self.optimizer.zero_grad()
        n = batch["input_ids"].shape[0]
        starts = range(0, n, self.micro_batch_size)
        step_loss = 0.0
        for start in starts:
            micro = {k: v[start : start + self.micro_batch_size] for k, v in batch.items()}
            step_loss += self._compute_loss_and_backward(micro, n_micro_batches=len(starts)).item() / len(starts)
        grad_norm = clip_grad_norm_(self.fsdp_model, self.config.optim.clip_grad)
        if not torch.isfinite(grad_norm):
            logger.warning("grad_norm is not finite (%s): skipping this step", grad_norm.item())
            self.optimizer.zero_grad()
        else:
            self.optimizer.step()
        self.lr_scheduler.step()
        lr = self.lr_scheduler.get_last_lr()[0]
        return {
            "train/loss": self._all_reduce_mean(step_loss),
            "train/lr(1e-3)": lr * 1e3,
            "train/grad_norm": float(grad_norm),
        }

    def validation_step(self, batch: dict) -> float:
        """Loss of one validation micro batch, averaged over ranks."""
        self.fsdp_model.eval()
        with torch.no_grad():
            loss = self._compute_loss_and_backward(batch, do_backward=False)
        return self._all_reduce_mean(loss.item())

    def validate(self) -> float | None:
        """Mean loss over the validation set (None when there is none)."""
        if self.val_dataloader is None or len(self.val_dataloader) == 0:
            return None
        losses = [self.validation_step(batch) for batch in self.val_dataloader]
        return sum(losses) / len(losses)

    # -------------------------------------------------------------------------------------------------------
    # checkpoints
    # -------------------------------------------------------------------------------------------------------
    def save_checkpoint(self, step: int) -> str:
        """Write ``default_local_dir/global_step_{step}`` as a Hugging Face model directory (a collective).

        LoRA runs save the merged model there and the adapter (PEFT format) in ``lora_adapter/``.
        """
        from transformers import AutoModelForCausalLM

        path = os.path.join(os.path.expanduser(self.config.trainer.default_local_dir), f"global_step_{step}")
        state = get_fsdp_full_state_dict(self.fsdp_model, offload_to_cpu=True, rank0_only=True)
        if dist.get_rank() == 0:
            os.makedirs(path, exist_ok=True)
            if self.is_lora:
                self._save_lora_adapter(state, os.path.join(path, "lora_adapter"))
                state = merge_lora_state_dict(state, self.lora_scaling)
            with torch.device("meta"):
                skeleton = AutoModelForCausalLM.from_config(self.hf_config)
            if self.generation_config is not None:
                skeleton.generation_config = self.generation_config
            skeleton.save_pretrained(path, state_dict=state)
            self.tokenizer.save_pretrained(path)
            hdfs_dir = self.config.trainer.default_hdfs_dir
            if hdfs_dir:
                from verl.utils import hdfs_io

                hdfs_io.makedirs(hdfs_dir, exist_ok=True)
                hdfs_io.copy(src=path, dst=os.path.join(hdfs_dir, os.path.basename(path)))
            self._rotate_checkpoints(path)
        dist.barrier()
        return path

    def _save_lora_adapter(self, state: dict, adapter_dir: str) -> None:
        from safetensors.torch import save_file

        os.makedirs(adapter_dir, exist_ok=True)
        save_file(lora_adapter_state_dict(state), os.path.join(adapter_dir, "adapter_model.safetensors"))
        self.peft_config.save_pretrained(adapter_dir)

    def _rotate_checkpoints(self, path: str) -> None:
        self.saved_paths.append(path)
        keep = self.config.trainer.max_ckpt_to_keep
        if keep is not None and keep > 0:
            while len(self.saved_paths) > keep:
                shutil.rmtree(self.saved_paths.pop(0), ignore_errors=True)

    # -------------------------------------------------------------------------------------------------------
    # loop
    # -------------------------------------------------------------------------------------------------------
    def fit(self) -> None:
        """Train for ``total_training_steps`` (default: epochs x batches per epoch), validating and saving."""
        from verl.utils.tracking import Tracking

        rank = dist.get_rank()
        tracking = None
        if rank == 0:
            tracking = Tracking(
                project_name=self.config.trainer.project_name,
                experiment_name=self.config.trainer.experiment_name,
                default_backend=self.config.trainer.logger,
                config=self.config.to_dict(),
            )
        test_freq, save_freq = self.config.trainer.test_freq, self.config.trainer.save_freq
        global_step = self.start_step
        if global_step >= self.total_steps:
            return
        epochs = -(-self.total_steps // self.steps_per_epoch)
        for epoch in range(global_step // self.steps_per_epoch, epochs):
            self.train_sampler.set_epoch(epoch)
            skip = global_step - epoch * self.steps_per_epoch  # batches of this epoch done before a resume
            for index, batch in enumerate(self.train_dataloader):
                if index < skip:
                    continue
                global_step += 1
                metrics = self.training_step(batch)
                if tracking is not None:
                    tracking.log(data=metrics, step=global_step)
                is_last = global_step >= self.total_steps
                if (test_freq > 0 and global_step % test_freq == 0) or is_last:
                    val_loss = self.validate()
                    if tracking is not None and val_loss is not None:
                        tracking.log(data={"val/loss": val_loss}, step=global_step)
                if (save_freq > 0 and global_step % save_freq == 0) or is_last:
                    self.save_checkpoint(global_step)
                if is_last:
                    return


# ------------------------------------------------------------------------------------------------------------
# entry points
# ------------------------------------------------------------------------------------------------------------
def run_sft(config: DictConfig | SFTConfig) -> None:
    """Set up the process group, meshes, tokenizer and datasets, then train (one call per torchrun process)."""
    from torch.distributed.device_mesh import init_device_mesh

    from verl.utils.fs import copy_to_local
    from verl.utils.tokenizer import hf_tokenizer

    world_size = int(os.environ.get("WORLD_SIZE", 1))
    config = validate_sft_config(config, world_size)  # typed once, before any process group, model or data
    _, _, world_size = initialize_global_process_group()
    device = get_device_name()
    device_mesh = init_device_mesh(device, mesh_shape=(world_size,), mesh_dim_names=("fsdp",))
    sp = config.ulysses_sequence_parallel_size
    ulysses_device_mesh = init_device_mesh(device, mesh_shape=(world_size // sp, sp), mesh_dim_names=("dp", "sp"))
    source = config.trainer.resume_path or config.model.partial_pretrain
    local_model_path = copy_to_local(os.path.expanduser(source), verbose=True)
    tokenizer = hf_tokenizer(local_model_path, trust_remote_code=config.model.trust_remote_code)
    train_dataset = create_sft_dataset(config.data.train_files, config.data, tokenizer)
    val_files = config.data.val_files
    val_dataset = create_sft_dataset(val_files, config.data, tokenizer) if val_files else None
    trainer = FSDPSFTTrainer(
        config=config,
        device_mesh=device_mesh,
        ulysses_device_mesh=ulysses_device_mesh,
        tokenizer=tokenizer,
        train_dataset=train_dataset,
        val_dataset=val_dataset,
    )
    trainer.fit()
    dist.barrier()
    destroy_global_process_group()


@hydra.main(config_path="config", config_name="sft_trainer", version_base=None)
def main(config: DictConfig) -> None:
    """``torchrun -m verl.trainer.fsdp_sft_trainer key=value ...`` (config: ``sft_trainer.yaml``)."""
    run_sft(config)


if __name__ == "__main__":
    from verl.utils.hydra_overrides import run_hydra_entry

    run_hydra_entry(main)  # verl's `+key=value` for keys this YAML has
