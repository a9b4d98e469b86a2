"""Command line, config and shared steps of ``python -m verl.model_merger {merge,test}``."""

from __future__ import annotations

import argparse
import logging
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

logger = logging.getLogger(__name__)

__all__ = ["BaseModelMerger", "ModelMergerConfig", "generate_config_from_args", "parse_args"]

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "auto": None}


@dataclass
class ModelMergerConfig:
    """What to merge and where: ``operation`` is ``merge`` or ``test``, ``backend`` ``fsdp`` or ``megatron``.

    ``dtype`` (an addition to verl's fields) is the dtype of the written weights: ``bfloat16`` as verl does,
    or ``float32``/``float16``, or ``auto`` to keep the dtype the shards were saved in.
    """

    operation: str
    backend: str
    target_dir: str | None = "tmp"
    hf_upload_path: str | None = None
    private: bool = False
    test_hf_dir: str | None = None
    tie_word_embedding: bool = False
    is_value_model: bool = False
    local_dir: str | None = None
    hf_model_config_path: str | None = None
    use_cpu_initialization: bool = False
    dtype: str = "bfloat16"
    hf_upload: bool = field(init=False)

    def __post_init__(self):
        if self.operation not in ("merge", "test"):
            raise ValueError(f"operation={self.operation!r}: expected 'merge' or 'test'")
        if self.backend not in ("fsdp", "megatron"):
            raise ValueError(f"backend={self.backend!r}: expected 'fsdp' or 'megatron'")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype={self.dtype!r}: expected one of {sorted(_DTYPES)}")
        if self.operation == "test" and not self.test_hf_dir:
            raise ValueError("operation='test' needs test_hf_dir (the reference Hugging Face model folder)")
        self.hf_upload = self.operation == "merge" and bool(self.hf_upload_path)

    @property
    def torch_dtype(self) -> torch.dtype | None:
        """The output dtype, or None for ``auto`` (keep the saved dtype)."""
        return _DTYPES[self.dtype]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``merge``/``test`` sub-commands and their options (``argv`` defaults to ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(prog="python -m verl.model_merger", description="verl model merger")
    sub = parser.add_subparsers(dest="operation", required=True, help="merge or test")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--backend", type=str, required=True, choices=["fsdp", "megatron"], help="training backend")
    common.add_argument("--local_dir", type=str, required=True, help="checkpoint folder, e.g. .../global_step_N/actor")
    common.add_argument("--tie-word-embedding", action="store_true", help="tied input/output embeddings (megatron)")
    common.add_argument("--is-value-model", action="store_true", help="a critic: token-classification head")
    common.add_argument("--use_cpu_initialization", action="store_true", help="build the model on CPU (megatron)")
    common.add_argument(
        "--dtype", type=str, default="bfloat16", choices=sorted(_DTYPES), help="dtype of the written weights"
    )
    merge = sub.add_parser("merge", parents=[common], help="merge shards into a Hugging Face model")
    merge.add_argument("--target_dir", default="tmp", type=str, help="output folder (created)")
    merge.add_argument("--hf_upload_path", default=None, type=str, help="Hugging Face Hub repo id to upload to")
    merge.add_argument("--private", action="store_true", help="create the Hub repo as private")
    test = sub.add_parser("test", parents=[common], help="compare merged weights with a reference HF model")
    test.add_argument("--test_hf_dir", type=str, required=True, help="reference Hugging Face model folder")
    return parser.parse_args(argv)


def generate_config_from_args(args: argparse.Namespace) -> ModelMergerConfig:
    """A :class:`ModelMergerConfig` from parsed arguments (``hf_model_config_path = local_dir/huggingface``)."""
    common = {
        "operation": args.operation,
        "backend": args.backend,
        "tie_word_embedding": args.tie_word_embedding,
        "is_value_model": args.is_value_model,
        "local_dir": args.local_dir,
        "hf_model_config_path": os.path.join(args.local_dir, "huggingface"),
        "use_cpu_initialization": args.use_cpu_initialization,
        "dtype": getattr(args, "dtype", "bfloat16"),
    }
    if args.operation == "merge":
        config = ModelMergerConfig(
            **common, target_dir=args.target_dir, hf_upload_path=args.hf_upload_path, private=args.private
        )
        os.makedirs(config.target_dir, exist_ok=True)
        return config
    return ModelMergerConfig(**common, target_dir=None, test_hf_dir=args.test_hf_dir)


class BaseModelMerger(ABC):
    """Shared steps: the HF model class, generation config, LoRA adapter, saving, upload, and the ``test`` check."""

    def __init__(self, config: ModelMergerConfig):
        from transformers import AutoConfig

        self.config = config
        self.hf_model_config_path = config.hf_model_config_path or os.path.join(config.local_dir, "huggingface")
        if not os.path.isfile(os.path.join(self.hf_model_config_path, "config.json")):
            raise FileNotFoundError(
                f"no config.json in {self.hf_model_config_path!r}: --local_dir must be a checkpoint folder "
                "such as .../global_step_N/actor with a huggingface/ sub-folder"
            )
        self.model_config = AutoConfig.from_pretrained(self.hf_model_config_path)

    def get_transformers_auto_model_class(self):
        """AutoModelForTokenClassification for value models, else the class for ``architectures[0]``."""
        import transformers

        if self.config.is_value_model:
            return transformers.AutoModelForTokenClassification
        arch = (getattr(self.model_config, "architectures", None) or ["ForCausalLM"])[0]
        if arch.endswith("ForTokenClassification"):
            return transformers.AutoModelForTokenClassification
        if arch.endswith("ForCausalLM"):
            return transformers.AutoModelForCausalLM
        if arch.endswith("ForConditionalGeneration"):
            return getattr(transformers, "AutoModelForImageTextToText", None) or transformers.AutoModelForVision2Seq
        raise NotImplementedError(f"architectures[0]={arch!r} in {self.hf_model_config_path}: unknown model class")

    def patch_model_generation_config(self, model):
        """Use the checkpoint's ``generation_config.json`` (eos/pad ids) when the model can generate."""
        if not model.can_generate():
            return model
        from transformers import GenerationConfig

        try:
            model.generation_config = GenerationConfig.from_pretrained(self.hf_model_config_path)
        except OSError:
            logger.warning("no generation_config.json in %s; keeping the default", self.hf_model_config_path)
        return model

    def lora_config_from_checkpoint(self) -> dict | None:
        """The adapter config the checkpoint manager saved (``local_dir/lora_adapter/adapter_config.json``)."""
        from verl.utils.checkpoint.lora import LORA_ADAPTER_DIR, load_lora_config

        return load_lora_config(os.path.join(self.config.local_dir, LORA_ADAPTER_DIR))

    def resolve_lora(self, state_dict: dict) -> tuple[dict, dict | None, dict | None]:
        """``(plain state dict, adapter tensors, adapter config)``; LoRA deltas are merged when alpha is known.

        Without a saved adapter config only the base weights are kept (as verl does) and the adapter config is
        inferred from shapes with ``lora_alpha`` 0.
        """
        from verl.utils.checkpoint.lora import (
            has_lora_weights,
            infer_lora_config,
            lora_adapter_state_dict,
            merge_lora_state_dict,
        )

        if not has_lora_weights(state_dict):
            return state_dict, None, None
        adapter = lora_adapter_state_dict(state_dict)
        lora_config = self.lora_config_from_checkpoint()
        if lora_config is None:
            logger.warning("checkpoint has LoRA weights but no lora_adapter/adapter_config.json: deltas not merged")
            lora_config = infer_lora_config(adapter, getattr(self.model_config, "_name_or_path", None))
            plain = merge_lora_state_dict(state_dict, {**lora_config, "lora_alpha": 0.0})
        else:
            plain = merge_lora_state_dict(state_dict, lora_config)
        return plain, adapter, lora_config

    def cast(self, state_dict: dict) -> dict:
        """Floating tensors to the configured output dtype (unchanged for ``auto``)."""
        dtype = self.config.torch_dtype
        if dtype is None:
            return state_dict
        return {k: v.to(dtype) if v.is_floating_point() else v for k, v in state_dict.items()}

    def save_lora_adapter(self, adapter: dict, lora_config: dict) -> str:
        """Write the adapter to ``target_dir/lora_adapter`` in peft's format."""
        from verl.utils.checkpoint.lora import LORA_ADAPTER_DIR, save_lora_adapter

        return save_lora_adapter(adapter, lora_config, os.path.join(self.config.target_dir, LORA_ADAPTER_DIR))

    def save_hf_model_and_tokenizer(self, state_dict: dict) -> None:
        """Build the HF model from ``huggingface/config.json`` with ``state_dict`` and ``save_pretrained`` it."""
        from verl.utils.checkpoint.fsdp_checkpoint_manager import hf_model_from_state_dict

        model = hf_model_from_state_dict(self.model_config, state_dict, self.get_transformers_auto_model_class())
        model = self.patch_model_generation_config(model)
        model.save_pretrained(self.config.target_dir)
        self.save_processing_class()

    def save_processing_class(self) -> None:
        """Copy the processor (multimodal) or tokenizer saved under ``huggingface/`` into ``target_dir``."""
        from verl.utils.tokenizer import hf_processor, hf_tokenizer

        processor = hf_processor(self.hf_model_config_path)
        if processor is not None:
            processor.save_pretrained(self.config.target_dir)
            return
        try:
            tokenizer = hf_tokenizer(self.hf_model_config_path)
        except (OSError, ValueError) as e:
            logger.warning("no tokenizer in %s (%s); the merged model has none", self.hf_model_config_path, e)
            return
        tokenizer.save_pretrained(self.config.target_dir)

    def upload_to_huggingface(self) -> None:
        """Create ``hf_upload_path`` on the Hub (private if asked) and upload ``target_dir``."""
        try:
            from huggingface_hub import HfApi
        except ImportError as e:
            raise ImportError("--hf_upload_path needs the huggingface_hub package") from e
        api = HfApi()
        api.create_repo(repo_id=self.config.hf_upload_path, private=self.config.private, exist_ok=True)
        api.upload_folder(folder_path=self.config.target_dir, repo_id=self.config.hf_upload_path, repo_type="model")

    def test_state_dict(self, state_dict: dict) -> None:
        """Assert ``state_dict`` equals the reference model in ``test_hf_dir`` key by key (shape, dtype, values)."""
        auto_cls = self.get_transformers_auto_model_class()
        dtype = self.config.torch_dtype or "auto"
        reference = auto_cls.from_pretrained(self.config.test_hf_dir, dtype=dtype).state_dict()
        missing = sorted(set(reference) - set(state_dict))
        extra = sorted(set(state_dict) - set(reference))
        # A tied output embedding is one tensor stored once; either side may list it.
        if getattr(self.model_config, "tie_word_embeddings", False):
            missing = [k for k in missing if k != "lm_head.weight"]
            extra = [k for k in extra if k != "lm_head.weight"]
        assert not missing and not extra, (
            f"merged keys differ from {self.config.test_hf_dir}: missing {missing}, extra {extra}"
        )
        for key in sorted(set(reference) & set(state_dict)):
            got, want = state_dict[key], reference[key]
            assert got.shape == want.shape, f"{key}: merged shape {tuple(got.shape)} != reference {tuple(want.shape)}"
            assert got.dtype == want.dtype, f"{key}: merged dtype {got.dtype} != reference {want.dtype}"
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6, msg=lambda m, k=key: f"{k}: {m}")
        print(f"merged weights match {self.config.test_hf_dir} ({len(reference)} tensors)")

    @abstractmethod
    def merge_and_save(self) -> None:
        """Run the configured operation (merge to ``target_dir`` or test against ``test_hf_dir``)."""

    def cleanup(self) -> None:  # noqa: B027 (optional hook, not abstract)
        """Release resources (nothing to release by default)."""
