"""`data`: the prompt datasets and their loaders."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig

__all__ = ["CustomClsConfig", "DataConfig"]


@dataclass
class CustomClsConfig(BaseConfig):
    """`data.custom_cls`: a `torch.utils.data.Dataset` subclass used instead of `RLHFDataset`."""

    path: str | None = None
    name: str | None = None


@dataclass
class DataConfig(BaseConfig):
    """`data`."""

    tokenizer: str | None = None
    use_shm: bool = False
    train_files: str | list[str] = "~/data/rlhf/gsm8k/train.parquet"
    val_files: str | list[str] = "~/data/rlhf/gsm8k/test.parquet"
    train_max_samples: int = -1
    val_max_samples: int = -1
    prompt_key: str = "prompt"
    reward_fn_key: str = "data_source"
    max_prompt_length: int = 512
    max_response_length: int = 512
    train_batch_size: int = 1024
    val_batch_size: int | None = None
    return_raw_input_ids: bool = False
    return_raw_chat: bool = True
    return_full_prompt: bool = False
    shuffle: bool = True
    validation_shuffle: bool = False
    filter_overlong_prompts: bool = False
    filter_overlong_prompts_workers: int = 1
    truncation: str = "error"
    image_key: str = "images"
    video_key: str = "videos"
    audio_key: str = "audios"
    image_patch_size: int = 14
    mm_processor_kwargs: dict = field(default_factory=dict)
    return_multi_modal_inputs: bool = True
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    tool_config_path: str | None = None
    function_tool_path: str | None = None
    bad_multimodal_rows: str = "error"
    trust_remote_code: bool = False
    custom_cls: CustomClsConfig = field(default_factory=CustomClsConfig)
    gen_batch_size: int | None = None
    dataloader_num_workers: int = 0
    seed: int | None = None
    cache_dir: str = "~/.cache/verl/rlhf"
    need_tools_kwargs: bool = False

    @property
    def generation_batch_size(self) -> int:
        """Prompts the training dataloader yields per step."""
        return self.gen_batch_size or self.train_batch_size
