"""Tests for verl.utils.dataset: RLHFDataset (padding, truncation, filtering, fields), collate_fn, resumable loading."""

import io
import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from verl.demo.tiny_model import shipped_tokenizer_path
from verl.utils.dataset.dataloader import StatefulDataLoader
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn, create_rl_dataset, create_rl_sampler
from verl.utils.dataset.sampler import ResumableRandomSampler
from verl.utils.tokenizer import hf_tokenizer

# The shipped tokenizer is byte-level: a single user turn templates to len(content) + 19 tokens
# ("<|im_start|>" "user\n" content "<|im_end|>" "\n" "<|im_start|>" "assistant\n").
TEMPLATE_OVERHEAD = 19
PAD = 256


@pytest.fixture(scope="module")
def tokenizer():
    return hf_tokenizer(shipped_tokenizer_path())


def _write_parquet(path, contents, extra=None):
    rows = []
    for i, content in enumerate(contents):
        row = {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": content}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"split": "train", "index": i, "tools_kwargs": {"calc": {"create_kwargs": {"x": i}}}},
        }
        row.update(extra or {})
        rows.append(row)
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def _config(**kw):
    base = {"max_prompt_length": 32, "filter_overlong_prompts": False, "truncation": "error"}
    base.update(kw)
    return OmegaConf.create(base)


def test_left_padding_positions_and_fields(tmp_path, tokenizer):
    path = _write_parquet(tmp_path / "d.parquet", ["hi", "2+3=?"])
    ds = RLHFDataset(path, tokenizer, _config(return_raw_chat=True, return_full_prompt=True))
    assert len(ds) == 2
    item = ds[0]
    n = 2 + TEMPLATE_OVERHEAD
    assert item["input_ids"].shape == item["attention_mask"].shape == item["position_ids"].shape == (32,)
    assert torch.all(item["input_ids"][: 32 - n] == PAD) and item["input_ids"][32 - n] == 257  # <|im_start|>
    assert item["attention_mask"].tolist() == [0] * (32 - n) + [1] * n
    assert item["position_ids"].tolist() == [0] * (32 - n) + list(range(n))
    assert item["raw_prompt_ids"] == item["input_ids"][32 - n :].tolist()
    assert tokenizer.decode(item["raw_prompt_ids"]) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert item["full_prompts"] == tokenizer.decode(item["raw_prompt_ids"])
    assert item["raw_prompt"] == [{"role": "user", "content": "hi"}]
    assert "prompt" not in item  # consumed
    assert item["data_source"] == "openai/gsm8k" and item["ability"] == "math"
    assert item["reward_model"] == {"style": "rule", "ground_truth": "0"}
    assert ds[1]["index"] == 1
    assert ds[1]["tools_kwargs"] == {"calc": {"create_kwargs": {"x": 1}}} and ds[1]["interaction_kwargs"] == {}


def test_optional_fields_absent_by_default(tmp_path, tokenizer):
    ds = RLHFDataset(_write_parquet(tmp_path / "d.parquet", ["hi"]), tokenizer, _config())
    assert "raw_prompt" not in ds[0] and "full_prompts" not in ds[0]


@pytest.mark.parametrize("truncation", ["left", "right", "middle"])
def test_truncation_modes(tmp_path, tokenizer, truncation):
    content = "abcdefghijklmnopqrstuvwxyz0123456789"  # 36 + 19 = 55 tokens > 32
    full = tokenizer.encode(
        tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        ),
        add_special_tokens=False,
    )
    assert len(full) == 55
    ds = RLHFDataset(_write_parquet(tmp_path / "d.parquet", [content]), tokenizer, _config(truncation=truncation))
    item = ds[0]
    expected = {"left": full[-32:], "right": full[:32], "middle": full[:16] + full[-16:]}[truncation]
    assert item["input_ids"].tolist() == expected
    assert item["attention_mask"].tolist() == [1] * 32
    assert item["raw_prompt_ids"] == expected
    assert item["position_ids"].tolist() == list(range(32))


def test_truncation_error_raises(tmp_path, tokenizer):
    ds = RLHFDataset(_write_parquet(tmp_path / "d.parquet", ["x" * 40]), tokenizer, _config(truncation="error"))
    with pytest.raises((NotImplementedError, RuntimeError), match="32"):
        ds[0]


def test_bad_truncation_value(tmp_path, tokenizer):
    with pytest.raises(ValueError, match="truncation='sideways'"):
        RLHFDataset(_write_parquet(tmp_path / "d.parquet", ["x"]), tokenizer, _config(truncation="sideways"))


def test_filter_overlong_prompts(tmp_path, tokenizer):
    # 13 + 19 = 32 tokens fits exactly; 14 + 19 = 33 does not
    contents = ["a" * 13, "b" * 14, "c", "d" * 50]
    path = _write_parquet(tmp_path / "d.parquet", contents)
    kept = RLHFDataset(path, tokenizer, _config(filter_overlong_prompts=True))
    assert [kept[i]["index"] for i in range(len(kept))] == [0, 2]
    # the dataset's own default is to filter when the key is absent
    default = RLHFDataset(path, tokenizer, OmegaConf.create({"max_prompt_length": 32}))
    assert len(default) == 2
    assert len(RLHFDataset(path, tokenizer, _config(filter_overlong_prompts=False))) == 4


def test_filter_that_drops_every_row_names_the_files_and_the_limit(tmp_path, tokenizer):
    path = _write_parquet(tmp_path / "d.parquet", ["b" * 14, "d" * 50])
    with pytest.raises(ValueError, match=r"dropped all 2 rows of .*d\.parquet.*max_prompt_length=32.*shortest .* 33"):
        RLHFDataset(path, tokenizer, _config(filter_overlong_prompts=True))


def test_several_files_concatenate_and_missing_file(tmp_path, tokenizer):
    a = _write_parquet(tmp_path / "a.parquet", ["x", "y"])
    b = _write_parquet(tmp_path / "b.parquet", ["z"])
    ds = RLHFDataset(OmegaConf.create([a, b]), tokenizer, _config())
    assert len(ds) == 3 and ds[2]["reward_model"]["ground_truth"] == "0"
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        RLHFDataset(str(tmp_path / "nope.parquet"), tokenizer, _config())


def test_custom_prompt_key(tmp_path, tokenizer):
    path = tmp_path / "q.parquet"
    pd.DataFrame({"question": [[{"role": "user", "content": "hey"}]], "data_source": ["x"]}).to_parquet(path)
    ds = RLHFDataset(str(path), tokenizer, _config(prompt_key="question"))
    assert ds[0]["attention_mask"].sum() == 3 + TEMPLATE_OVERHEAD and ds[0]["index"] == 0
    with pytest.raises(KeyError, match="prompt_key='prompt'"):
        RLHFDataset(str(path), tokenizer, _config())


def test_collate_fn_keeps_lists_one_per_row(tmp_path, tokenizer):
    ds = RLHFDataset(_write_parquet(tmp_path / "d.parquet", ["ab", "cd", "ef"]), tokenizer, _config())
    batch = collate_fn([ds[i] for i in range(3)])
    assert batch["input_ids"].shape == (3, 32) and batch["input_ids"].dtype == torch.long
    for key in ("raw_prompt_ids", "reward_model", "data_source", "index"):
        assert isinstance(batch[key], np.ndarray) and batch[key].dtype == object and batch[key].shape == (3,), key
    # equal-length lists would become a (3, n) array with np.array; they must stay lists
    assert batch["raw_prompt_ids"][1] == ds[1]["raw_prompt_ids"]
    assert batch["reward_model"][2]["ground_truth"] == "2"


def test_pickle_drops_dataframe_and_restores(tmp_path, tokenizer):
    ds = RLHFDataset(_write_parquet(tmp_path / "d.parquet", ["ab", "cd"]), tokenizer, _config())
    state = ds.__getstate__()
    assert "dataframe" not in state
    clone = pickle.loads(pickle.dumps(ds))
    assert len(clone) == 2 and torch.equal(clone[1]["input_ids"], ds[1]["input_ids"])
    clone.resume_dataset_state()
    assert len(clone) == 2


def test_create_rl_dataset_custom_cls(tmp_path, tokenizer):
    path = _write_parquet(tmp_path / "d.parquet", ["ab"])
    module = tmp_path / "my_ds.py"
    module.write_text(
        "from torch.utils.data import Dataset\n"
        "class Good(Dataset):\n"
        "    def __init__(self, data_files, tokenizer, processor, config):\n"
        "        self.files = data_files\n"
        "    def __len__(self):\n        return 7\n"
        "class Bad:\n"
        "    def __init__(self, **kw):\n        pass\n"
    )
    good = create_rl_dataset(path, _config(custom_cls={"path": str(module), "name": "Good"}), tokenizer, None)
    assert len(good) == 7 and good.files == path
    with pytest.raises(TypeError, match="name='Bad'"):
        create_rl_dataset(path, _config(custom_cls={"path": str(module), "name": "Bad"}), tokenizer, None)
    plain = create_rl_dataset(path, _config(custom_cls={"path": None, "name": None}), tokenizer, None)
    assert isinstance(plain, RLHFDataset)


def test_create_rl_sampler(tmp_path):
    data = list(range(10))
    seq = create_rl_sampler(OmegaConf.create({"shuffle": False}), data)
    assert list(seq) == data
    a = create_rl_sampler(OmegaConf.create({"shuffle": True, "seed": 3}), data)
    b = create_rl_sampler(OmegaConf.create({"shuffle": True, "seed": 3}), data)
    c = create_rl_sampler(OmegaConf.create({"shuffle": True, "seed": 4}), data)
    assert isinstance(a, torch.utils.data.RandomSampler)
    first = list(a)
    assert sorted(first) == data and first == list(b) and first != list(c)
    assert list(a) != first  # a new epoch draws a new permutation


def _loader(dataset, num_workers=0):
    sampler = ResumableRandomSampler(dataset, generator=torch.Generator().manual_seed(1))
    return StatefulDataLoader(
        dataset, batch_size=3, sampler=sampler, num_workers=num_workers, drop_last=True, collate_fn=collate_fn
    )


def _indices(batch):
    return batch["index"].tolist()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_resume_is_exact(tmp_path, tokenizer, num_workers):
    warnings.filterwarnings("ignore", message=".*set_vital.*")
    ds = RLHFDataset(_write_parquet(tmp_path / "d.parquet", [f"q{i}" for i in range(10)]), tokenizer, _config())
    epochs = 3
    reference = _loader(ds, num_workers)
    assert len(reference) == 3
    uninterrupted = [_indices(b) for _ in range(epochs) for b in reference]
    assert uninterrupted[:3] != uninterrupted[3:6]  # epochs differ, so a replayed epoch would be caught
    # stop after 2 (mid-epoch), 3 (end of epoch 0), 4 (mid epoch 1) and 6 (end of epoch 1) steps
    for stop in (2, 3, 4, 6):
        loader, seen, state = _loader(ds, num_workers), 0, None
        for _ in range(epochs):
            for _batch in loader:
                seen += 1
                if seen == stop:
                    state = loader.state_dict()
                    break
            if state is not None:
                break
        buffer = io.BytesIO()
        torch.save(state, buffer)  # the trainer stores it as data.pt
        buffer.seek(0)
        resumed = _loader(ds, num_workers)
        resumed.load_state_dict(torch.load(buffer, weights_only=False))
        # the trainer derives the epoch to continue from the step count, as verl does
        rest = [_indices(b) for _ in range(stop // len(resumed), epochs) for b in resumed]
        assert rest == uninterrupted[stop:], f"resume after {stop} steps"


def _truths(ds) -> list[str]:
    return [ds[i]["reward_model"]["ground_truth"] for i in range(len(ds))]


def test_max_samples_keeps_the_first_rows_or_a_seeded_random_choice(tmp_path, tokenizer):
    """data.train_max_samples / val_max_samples, as verl reads them: before any filter, the first N rows without
    data.shuffle, else a choice without replacement by numpy's generator seeded with data.seed."""
    path = _write_parquet(tmp_path / "d.parquet", [f"q{i}" for i in range(10)])
    assert _truths(RLHFDataset(path, tokenizer, _config(shuffle=False), max_samples=3)) == ["0", "1", "2"]
    chosen = _truths(RLHFDataset(path, tokenizer, _config(shuffle=True, seed=7), max_samples=4))
    expected = np.random.default_rng(7).choice(10, size=4, replace=False)
    assert chosen == [str(i) for i in expected]
    assert chosen == _truths(RLHFDataset(path, tokenizer, _config(shuffle=True, seed=7), max_samples=4))
    assert len(RLHFDataset(path, tokenizer, _config(), max_samples=-1)) == 10
    assert len(RLHFDataset(path, tokenizer, _config(), max_samples=50)) == 10
    limited = create_rl_dataset(path, _config(shuffle=False), tokenizer, None, max_samples=2)
    assert _truths(limited) == ["0", "1"]
    # the limit comes before the length filter (the first 3 rows, of which one is too long)
    mixed = _write_parquet(tmp_path / "m.parquet", ["a", "x" * 40, "b", "c"])
    filtered = RLHFDataset(mixed, tokenizer, _config(shuffle=False, filter_overlong_prompts=True), max_samples=3)
    assert _truths(filtered) == ["0", "2"]


def test_a_custom_dataset_without_max_samples_is_told_how_to_take_it(tmp_path, tokenizer):
    module = tmp_path / "old_dataset.py"
    module.write_text(
        "from verl.utils.dataset.rl_dataset import RLHFDataset\n"
        "class OldDataset(RLHFDataset):\n"
        "    def __init__(self, data_files, tokenizer, config, processor=None):\n"
        "        super().__init__(data_files, tokenizer, config, processor)\n"
    )
    path = _write_parquet(tmp_path / "d.parquet", ["a", "b", "c"])
    cfg = _config(custom_cls={"path": str(module), "name": "OldDataset"})
    assert len(create_rl_dataset(path, cfg, tokenizer, None)) == 3  # no limit asked: a v0.4 class works as before
    with pytest.raises(TypeError, match="max_samples"):
        create_rl_dataset(path, cfg, tokenizer, None, max_samples=2)


def test_apply_chat_template_kwargs_reach_the_template(tmp_path, tokenizer):
    import copy

    templated = copy.deepcopy(tokenizer)
    templated.chat_template = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        "{% if enable_thinking is defined and not enable_thinking %}/no_think{% endif %}"
    )
    path = _write_parquet(tmp_path / "d.parquet", ["hi"])
    plain = RLHFDataset(path, templated, _config(return_full_prompt=True))
    no_think = _config(return_full_prompt=True, apply_chat_template_kwargs={"enable_thinking": False})
    told = RLHFDataset(path, templated, no_think)
    assert plain[0]["full_prompts"] == "hi" and told[0]["full_prompts"] == "hi/no_think"
    assert len(told[0]["raw_prompt_ids"]) == len("hi/no_think")


def test_the_length_filter_counts_the_tool_schemas_a_multi_turn_rollout_renders(tmp_path, tokenizer):
    """data.tool_config_path (multi_turn.tool_config_path by default): a prompt that fits alone but not with the
    tools' system block is dropped, as the rollout would have to truncate it."""
    import os

    import verl

    tools = os.path.join(os.path.dirname(verl.__file__), os.pardir, "examples", "multiturn", "config", "tool_config",
                         "gsm8k_tool_config.yaml")  # fmt: skip
    path = _write_parquet(tmp_path / "d.parquet", ["2+3=?"])
    cfg = {"max_prompt_length": 64, "filter_overlong_prompts": True}
    assert len(RLHFDataset(path, tokenizer, _config(**cfg))) == 1
    with pytest.raises(ValueError, match="dropped all 1 rows"):
        RLHFDataset(path, tokenizer, _config(**cfg, tool_config_path=tools))
    assert len(RLHFDataset(path, tokenizer, _config(max_prompt_length=1024, filter_overlong_prompts=True,
                                                    tool_config_path=tools))) == 1  # fmt: skip
