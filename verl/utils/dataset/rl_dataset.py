"""RL prompt dataset over parquet files (chat template applied at load), its collate function and factories."""

from __future__ import annotations

import copy
import inspect
import logging
import os
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import torch
from omegaconf import DictConfig, ListConfig
from torch.utils.data import Dataset, Sampler, SequentialSampler

from verl.utils.dataset.multimodal_checks import BAD_MULTIMODAL_ROW_ACTIONS
from verl.utils.model import compute_position_id_with_mask
from verl.utils.torch_functional import postprocess_data

logger = logging.getLogger(__name__)

__all__ = ["RLHFDataset", "collate_fn", "create_rl_dataset", "create_rl_sampler"]

_TRUNCATIONS = ("error", "left", "right", "middle")
# processor outputs that describe the prompt's tokens rather than the images: the model gets them from position_ids
_PROMPT_ONLY_PROCESSOR_OUTPUTS = ("input_ids", "attention_mask", "second_per_grid_ts", "mm_token_type_ids")


def collate_fn(data_list: list[dict]) -> dict:
    """Batch dataset rows: tensors are stacked to ``(B, ...)``; every other value becomes a numpy object array (B,).

    Built with ``np.fromiter`` so list- or dict-valued fields stay one element per row (``np.array`` would turn
    equal-length lists into a 2-D array).
    """
    tensors: dict[str, list] = defaultdict(list)
    non_tensors: dict[str, list] = defaultdict(list)
    for row in data_list:
        for key, value in row.items():
            (tensors if isinstance(value, torch.Tensor) else non_tensors)[key].append(value)
    batch = {key: torch.stack(values, dim=0) for key, values in tensors.items()}
    for key, values in non_tensors.items():
        batch[key] = np.fromiter(values, dtype=object, count=len(values))
    return batch


def _cfg_get(config, key: str, default):
    """``config.get(key, default)`` for dict or OmegaConf configs (None means absent only for OmegaConf nulls).

    The defaults passed here are verl's ``RLHFDataset`` defaults for a config that lacks the key (a dataset built
    by hand from a partial dict, as verl's users do). The trainer always passes the whole ``data`` section, so a
    run's values come from ppo_trainer.yaml, never from here."""
    return config.get(key, default) if config is not None else default


def _truncate_ids(ids: list[int], max_length: int, truncation: str) -> list[int]:
    """Cut a token list to ``max_length`` the same way ``postprocess_data`` cuts the tensors."""
    if len(ids) <= max_length:
        return ids
    if truncation == "left":
        return ids[-max_length:]
    if truncation == "right":
        return ids[:max_length]
    if truncation == "middle":
        head = max_length // 2
        return ids[:head] + ids[len(ids) - (max_length - head) :]
    raise RuntimeError(
        f"prompt length {len(ids)} is longer than data.max_prompt_length={max_length} (truncation=error)"
    )


class RLHFDataset(Dataset):
    """Prompts for RL from parquet files; each item holds the left-padded templated prompt and the row's metadata.

    ``__getitem__`` returns ``input_ids``, ``attention_mask``, ``position_ids`` (each ``(max_prompt_length,)``),
    ``raw_prompt_ids`` (unpadded token list) and the row's other columns (``data_source``, ``reward_model``,
    ``extra_info``, ``ability``, ...), plus ``index``, ``tools_kwargs``, ``interaction_kwargs``.

    ``max_samples`` (``data.train_max_samples`` / ``data.val_max_samples``): keep at most that many rows, read before
    any filter: with ``shuffle`` in the config a random choice seeded by its ``seed``, else the first rows (-1: all).
    """

    def __init__(
        self,
        data_files: str | Sequence[str],
        tokenizer,
        config: DictConfig | dict | None,
        processor=None,
        max_samples: int = -1,
    ):
        if not isinstance(data_files, list | ListConfig | tuple):
            data_files = [data_files]
        self.data_files = list(copy.deepcopy(data_files))
        self.original_data_files = list(copy.deepcopy(data_files))  # resume_dataset_state re-reads these
        self.tokenizer = tokenizer
        self.processor = processor
        self.config = config if config is not None else {}

        self.cache_dir = os.path.expanduser(_cfg_get(config, "cache_dir", "~/.cache/verl/rlhf"))
        self.prompt_key = _cfg_get(config, "prompt_key", "prompt")
        self.image_key = _cfg_get(config, "image_key", "images")
        self.video_key = _cfg_get(config, "video_key", "videos")
        self.max_prompt_length = int(_cfg_get(config, "max_prompt_length", 1024))
        self.return_raw_chat = bool(_cfg_get(config, "return_raw_chat", False))
        self.return_full_prompt = bool(_cfg_get(config, "return_full_prompt", False))
        self.truncation = _cfg_get(config, "truncation", "error")
        self.filter_overlong_prompts = bool(_cfg_get(config, "filter_overlong_prompts", True))
        cpu_count = os.cpu_count() or 1
        workers = _cfg_get(config, "filter_overlong_prompts_workers", max(1, cpu_count // 4))
        self.num_workers = min(max(1, int(workers)), cpu_count)
        self.use_shm = bool(_cfg_get(config, "use_shm", False))
        self.need_tools_kwargs = bool(_cfg_get(config, "need_tools_kwargs", False))
        self.bad_multimodal_rows = _cfg_get(config, "bad_multimodal_rows", "error")
        self.max_samples = int(max_samples)
        self.shuffle = bool(_cfg_get(config, "shuffle", False))
        self.seed = _cfg_get(config, "seed", None)
        self.apply_chat_template_kwargs = dict(_cfg_get(config, "apply_chat_template_kwargs", None) or {})
        self.mm_processor_kwargs = dict(_cfg_get(config, "mm_processor_kwargs", None) or {})
        self.tool_config_path = _cfg_get(config, "tool_config_path", None)
        self._tool_schemas = None  # {tool name: schema}, loaded when the length filter first needs them
        self.num_bad_multimodal_rows = 0  # rows dropped by bad_multimodal_rows=skip
        self.serialize_dataset = False

        if self.truncation not in _TRUNCATIONS:
            raise ValueError(f"data.truncation={self.truncation!r} is not supported; expected one of {_TRUNCATIONS}")
        if self.bad_multimodal_rows not in BAD_MULTIMODAL_ROW_ACTIONS:
            raise ValueError(
                f"data.bad_multimodal_rows={self.bad_multimodal_rows!r} is not supported; expected one of "
                f"{BAD_MULTIMODAL_ROW_ACTIONS}"
            )
        if self.max_prompt_length <= 0:
            raise ValueError(f"data.max_prompt_length={self.max_prompt_length} must be a positive integer")
        self._download()
        self._read_files_and_tokenize()

    def _download(self, use_origin_parquet: bool = False) -> None:
        """Make every data file local (remote ones are copied into ``cache_dir``)."""
        from verl.utils.fs import copy_to_local

        files = self.original_data_files if use_origin_parquet else self.data_files
        self.data_files = [copy_to_local(src=f, cache_dir=self.cache_dir, use_shm=self.use_shm) for f in files]

    def _read_files_and_tokenize(self) -> None:
        """Load and concatenate the parquet files, then drop prompts longer than ``max_prompt_length`` if asked."""
        import datasets

        for path in self.data_files:
            if not os.path.exists(path):
                raise FileNotFoundError(f"data file {path!r} (from data.train_files / data.val_files) does not exist")
        frames = [datasets.load_dataset("parquet", data_files=path)["train"] for path in self.data_files]
        self.dataframe = datasets.concatenate_datasets(frames)
        if self.prompt_key not in self.dataframe.column_names:
            raise KeyError(
                f"data.prompt_key={self.prompt_key!r} is not a column of {self.data_files}; "
                f"columns are {self.dataframe.column_names}"
            )
        logger.info("dataset len: %d", len(self.dataframe))
        self.dataframe, kept = self._limit_rows(self.dataframe)
        self.dataframe = self._check_multimodal_rows(self.dataframe, [len(frame) for frame in frames], kept)
        self.dataframe = self.maybe_filter_out_long_prompts(self.dataframe)

    def _limit_rows(self, dataframe):
        """At most ``max_samples`` rows (a seeded random choice when ``shuffle``, else the first ones), and the
        indices of the kept rows in the files' concatenation (None when all are kept)."""
        total = len(dataframe)
        if self.max_samples <= 0 or self.max_samples >= total:
            return dataframe, None
        if self.shuffle:
            rng = np.random.default_rng(*(() if self.seed is None else (self.seed,)))
            indices = rng.choice(total, size=self.max_samples, replace=False)
        else:
            indices = np.arange(self.max_samples)
        logger.info("using %d of the %d rows of %s (max_samples)", self.max_samples, total, self.data_files)
        kept = indices.tolist()
        return dataframe.select(kept), kept

    def _check_multimodal_rows(self, dataframe, rows_per_file: list[int], kept: list[int] | None = None):
        """Refuse (``data.bad_multimodal_rows=error``) or drop with a warning (``skip``) the rows whose images cannot
        be decoded or whose ``<image>``/``<video>`` placeholders do not match their images/videos; checked once at
        load, so a bad row never reaches a batch. Only with a processor and an image or video column. ``kept``: the
        source row of each row of ``dataframe`` when ``max_samples`` chose some (for the messages)."""
        from verl.utils.dataset.multimodal_checks import find_bad_multimodal_rows

        columns = [c for c in (self.image_key, self.video_key) if c in dataframe.column_names]
        if self.processor is None or not columns:
            return dataframe
        rows = dataframe.select_columns([self.prompt_key, *columns])
        bad = find_bad_multimodal_rows(rows, self.prompt_key, self.image_key, self.video_key)
        if not bad:
            return dataframe
        ends = np.cumsum(rows_per_file)
        messages = []
        for index, reason in bad:
            source = index if kept is None else kept[index]
            file_index = int(np.searchsorted(ends, source, side="right"))
            row_in_file = source - (int(ends[file_index - 1]) if file_index else 0)
            messages.append(f"{self.data_files[file_index]} row {row_in_file} (dataset row {source}): {reason}")
        if self.bad_multimodal_rows == "error":
            raise ValueError(
                f"{len(bad)} multimodal row(s) cannot be used; first: {messages[0]}. Fix the data, or set "
                "data.bad_multimodal_rows=skip to drop such rows with a warning"
            )
        for message in messages:
            logger.warning("data.bad_multimodal_rows=skip: dropping %s", message)
        self.num_bad_multimodal_rows += len(bad)
        logger.warning("dropped %d bad multimodal row(s) of %d", self.num_bad_multimodal_rows, len(dataframe))
        dropped = {index for index, _ in bad}
        return dataframe.select([i for i in range(len(dataframe)) if i not in dropped])

    def _template(self, templater, messages: list, tools: list | None = None) -> str:
        """The prompt text of ``messages`` (with ``data.apply_chat_template_kwargs``, and ``tools`` when given)."""
        kwargs = dict(self.apply_chat_template_kwargs)
        if tools:
            kwargs["tools"] = tools
        return templater.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)

    def _offered_tools(self, row: dict) -> list | None:
        """The schemas of the tools a multi-turn rollout offers ``row`` (``data.tool_config_path``): those its
        ``extra_info.tools_kwargs`` names, else all; None without a tool config."""
        if not self.tool_config_path:
            return None
        if self._tool_schemas is None:
            from verl.multi_turn.tools.utils.tool_registry import initialize_tools_from_config

            tools = initialize_tools_from_config(self.tool_config_path)
            self._tool_schemas = {
                t.tool_schema.function.name: t.tool_schema.model_dump(exclude_none=True) for t in tools
            }
        named = list((row.get("extra_info") or {}).get("tools_kwargs") or {})
        return [self._tool_schemas[n] for n in named if n in self._tool_schemas] or list(self._tool_schemas.values())

    def _prompt_length(self, row: dict) -> int:
        """Token length of the templated prompt of ``row`` (processor output length for multimodal rows), with the
        tools a multi-turn rollout renders into it."""
        messages = self._build_messages(dict(row))
        tools = self._offered_tools(row)
        if self.processor is not None and (self.image_key in row or self.video_key in row):
            from verl.utils.dataset.vision_utils import process_image, process_video

            text = self._template(self.processor, messages, tools)
            images = [process_image(im) for im in row.get(self.image_key) or []] or None
            videos = [process_video(v) for v in row.get(self.video_key) or []] or None
            inputs = self.processor(text=[text], images=images, videos=videos, **self.mm_processor_kwargs)
            return len(inputs["input_ids"][0])
        text = self._template(self.tokenizer, messages, tools)
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def maybe_filter_out_long_prompts(self, dataframe):
        """Drop rows whose templated prompt exceeds ``max_prompt_length`` tokens (when ``filter_overlong_prompts``)."""
        if not self.filter_overlong_prompts:
            return dataframe
        before, dataframe_before = len(dataframe), dataframe
        dataframe = dataframe.filter(
            lambda row: self._prompt_length(row) <= self.max_prompt_length,
            num_proc=self.num_workers if self.num_workers > 1 else None,
            desc=f"Filtering prompts longer than {self.max_prompt_length} tokens",
        )
        logger.info("filtered dataset len: %d (dropped %d)", len(dataframe), before - len(dataframe))
        if before and not len(dataframe):
            shortest = min(self._prompt_length(row) for row in dataframe_before.select(range(min(before, 64))))
            raise ValueError(
                f"data.filter_overlong_prompts=True dropped all {before} rows of {self.data_files}: every templated "
                f"prompt is longer than data.max_prompt_length={self.max_prompt_length} tokens (the shortest of "
                f"the first {min(before, 64)} has {shortest}); raise data.max_prompt_length or shorten the prompts"
            )
        return dataframe

    def resume_dataset_state(self) -> None:
        """Re-read the original files after unpickling (the dataframe is not pickled unless ``serialize_dataset``)."""
        self.serialize_dataset = not hasattr(self, "original_data_files")
        if not self.serialize_dataset:
            self._download(use_origin_parquet=True)
            self._read_files_and_tokenize()
        else:
            logger.warning("old dataloader checkpoint: the dataset was serialized with it and is used as is")

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if not self.serialize_dataset and "dataframe" in state:
            del state["dataframe"]  # keeps the dataloader checkpoint (data.pt) small
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "dataframe" not in state:
            self._read_files_and_tokenize()

    def __len__(self) -> int:
        return len(self.dataframe)

    def _build_messages(self, row: dict) -> list:
        """Pop the chat messages from ``row``; split ``<image>``/``<video>`` placeholders into typed parts."""
        messages = row.pop(self.prompt_key)
        if isinstance(messages, str):
            raise TypeError(
                f"column {self.prompt_key!r} must hold chat messages [{{'role': ..., 'content': ...}}], got a string"
            )
        messages = [dict(m) for m in messages]
        if self.image_key in row or self.video_key in row:
            for message in messages:
                content = message["content"]
                if not isinstance(content, str):
                    continue
                parts = []
                for i, image_chunk in enumerate(content.split("<image>")):
                    if i > 0:
                        parts.append({"type": "image"})
                    for j, text in enumerate(image_chunk.split("<video>")):
                        if j > 0:
                            parts.append({"type": "video"})
                        if text:
                            parts.append({"type": "text", "text": text})
                message["content"] = parts
        return messages

    def __getitem__(self, item: int) -> dict:
        """One prompt: padded ``input_ids``/``attention_mask``/``position_ids`` ``(max_prompt_length,)`` + metadata."""
        row: dict = dict(self.dataframe[item])
        messages = self._build_messages(row)
        multi_modal_inputs = second_per_grid_ts = None
        if self.processor is not None and (self.image_key in row or self.video_key in row):
            raw_prompt, model_inputs, row = self._process_multimodal(messages, row)
            multi_modal_inputs = dict(model_inputs)
            input_ids, attention_mask = multi_modal_inputs["input_ids"], multi_modal_inputs["attention_mask"]
            second_per_grid_ts = multi_modal_inputs.get("second_per_grid_ts")
            for key in _PROMPT_ONLY_PROCESSOR_OUTPUTS:
                multi_modal_inputs.pop(key, None)
        else:
            raw_prompt = self._template(self.tokenizer, messages)
            model_inputs = self.tokenizer(raw_prompt, return_tensors="pt", add_special_tokens=False)
            input_ids, attention_mask = model_inputs["input_ids"], model_inputs["attention_mask"]

        input_ids, attention_mask = postprocess_data(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_length=self.max_prompt_length,
            pad_token_id=self.tokenizer.pad_token_id,
            left_pad=True,
            truncation=self.truncation,
        )
        position_ids = self._position_ids(input_ids, attention_mask, multi_modal_inputs, second_per_grid_ts)

        row["input_ids"] = input_ids[0]
        row["attention_mask"] = attention_mask[0]
        row["position_ids"] = position_ids
        if multi_modal_inputs is not None:
            row["multi_modal_inputs"] = multi_modal_inputs

        raw_prompt_ids = self.tokenizer.encode(raw_prompt, add_special_tokens=False)
        row["raw_prompt_ids"] = _truncate_ids(raw_prompt_ids, self.max_prompt_length, self.truncation)
        if self.return_raw_chat:
            row["raw_prompt"] = messages
        if self.return_full_prompt:
            row["full_prompts"] = raw_prompt

        extra_info = row.get("extra_info") or {}
        row["index"] = extra_info.get("index", 0)
        tools_kwargs = extra_info.get("tools_kwargs", {})
        if self.need_tools_kwargs and not tools_kwargs:
            logger.warning("tools_kwargs is empty for index %s, data source: %s", row["index"], row.get("data_source"))
        row["tools_kwargs"] = tools_kwargs
        row["interaction_kwargs"] = extra_info.get("interaction_kwargs", {})
        return row

    def _process_multimodal(self, messages: list, row: dict):
        """Template and run the processor on text + images/videos; returns (raw_prompt, processor outputs, row)."""
        from verl.utils.dataset.vision_utils import process_image, process_video

        raw_prompt = self._template(self.processor, messages)
        multi_modal_data = {}
        images = None
        if self.image_key in row and row[self.image_key] is not None:
            images = [process_image(image) for image in row.pop(self.image_key)]
            multi_modal_data["image"] = images
        videos = None
        if self.video_key in row and row[self.video_key] is not None:
            videos = [process_video(video) for video in row.pop(self.video_key)]
            multi_modal_data["video"] = [v.numpy() if isinstance(v, torch.Tensor) else v for v in videos]
        model_inputs = self.processor(
            text=[raw_prompt], images=images, videos=videos, return_tensors="pt", **self.mm_processor_kwargs
        )
        row["multi_modal_data"] = multi_modal_data
        return raw_prompt, model_inputs, row

    def _position_ids(self, input_ids, attention_mask, multi_modal_inputs, second_per_grid_ts=None) -> torch.Tensor:
        """``(P,)`` position ids from the mask; ``(3, P)`` rope indices for Qwen2-VL style image processors."""
        processor_name = type(getattr(self.processor, "image_processor", None)).__name__
        if self.processor is not None and "Qwen2VLImageProcessor" in processor_name:
            from verl.models.transformers.qwen2_vl import get_rope_index

            return get_rope_index(
                self.processor,
                input_ids=input_ids[0],
                image_grid_thw=(multi_modal_inputs or {}).get("image_grid_thw"),
                video_grid_thw=(multi_modal_inputs or {}).get("video_grid_thw"),
                second_per_grid_ts=second_per_grid_ts,
                attention_mask=attention_mask[0],
            )
        return compute_position_id_with_mask(attention_mask)[0]


def create_rl_dataset(data_paths, data_config, tokenizer, processor, max_samples: int = -1) -> Dataset:
    """Build the RL dataset: ``data.custom_cls`` (a ``torch.utils.data.Dataset`` subclass) if set, else RLHFDataset;
    ``max_samples`` (``data.train_max_samples`` / ``val_max_samples``) limits its rows (see RLHFDataset)."""
    custom_cls = _cfg_get(data_config, "custom_cls", None)
    if custom_cls is not None and custom_cls.get("path", None) is not None:
        from verl.utils.import_utils import load_extern_type

        path, name = custom_cls.get("path"), custom_cls.get("name")
        dataset_cls = load_extern_type(path, name)
        if not (isinstance(dataset_cls, type) and issubclass(dataset_cls, Dataset)):
            raise TypeError(
                f"data.custom_cls.name={name!r} from data.custom_cls.path={path!r} must be a subclass of "
                f"torch.utils.data.Dataset, got {dataset_cls!r}"
            )
    else:
        dataset_cls = RLHFDataset
    kwargs = {"data_files": data_paths, "tokenizer": tokenizer, "processor": processor, "config": data_config}
    if max_samples is not None and max_samples > 0:
        # a custom class written for verl before 0.6 takes no max_samples: it is passed only when set
        if dataset_cls is not RLHFDataset and "max_samples" not in inspect.signature(dataset_cls).parameters:
            raise TypeError(
                f"data.custom_cls {dataset_cls.__name__} takes no max_samples argument, so data.train_max_samples / "
                "data.val_max_samples cannot limit it; add `max_samples: int = -1` to its __init__, or leave both at -1"
            )
        kwargs["max_samples"] = max_samples
    return dataset_cls(**kwargs)


def create_rl_sampler(data_config, dataset) -> Sampler:
    """Sampler for the train dataloader: seeded resumable random order if ``data.shuffle``, else sequential."""
    from verl.utils.dataset.sampler import ResumableRandomSampler

    if _cfg_get(data_config, "shuffle", True):
        generator = torch.Generator()
        seed = _cfg_get(data_config, "seed", None)
        if seed is not None:  # null (verl 0.9's default) keeps a new generator's own fixed seed
            generator.manual_seed(int(seed))
        return ResumableRandomSampler(dataset, generator=generator)
    return SequentialSampler(dataset)
