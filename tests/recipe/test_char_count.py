"""The char_count tutorial recipe: its data generator, its reward function, and the pipeline its scripts run (a
short SFT with the project's SFT trainer, then 2 GRPO steps with the recipe's reward function, in process)."""

import math
import os

import pandas as pd
import pytest
from omegaconf import OmegaConf

from recipe.char_count.create_dataset import DATA_SOURCE, make_problems, make_prompt, write_dataset
from recipe.char_count.reward_function import char_count_reward_function
from tests.gloo_ranks import free_port
from tests.recipe.script_overrides import script_overrides

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPE = os.path.join(ROOT, "recipe", "char_count")


def test_generator_is_seeded_and_counts_right():
    problems = make_problems(300, seed=3)
    assert problems == make_problems(300, seed=3) and problems != make_problems(300, seed=4)
    assert len({(c, w) for c, w, _ in problems}) == 300
    for letter, word, count in problems:
        assert count == word.count(letter) and 4 <= len(word) <= 9 and set(word) <= set("abcd")
    counts = {n for *_, n in problems}
    assert 0 in counts and max(counts) >= 3  # "0" is a possible answer and counts vary
    with pytest.raises(ValueError, match="only"):
        make_problems(10_000, alphabet="ab", min_len=1, max_len=3)


def test_dataset_files_hold_out_the_test_problems(tmp_path):
    paths = write_dataset(str(tmp_path), seed=0, num_train=400, num_test=50, num_rl_train=100)
    sft_train, sft_test = pd.read_parquet(paths["sft_train"]), pd.read_parquet(paths["sft_test"])
    train, test = pd.read_parquet(paths["train"]), pd.read_parquet(paths["test"])
    assert (len(sft_train), len(sft_test), len(train), len(test)) == (400, 50, 100, 50)
    assert not set(sft_test.prompt) & set(sft_train.prompt)
    rl_prompts = [p[0]["content"] for p in train.prompt]
    assert set(rl_prompts) <= set(sft_train.prompt)  # RL revisits SFT prompts; the test set is new to both
    row = test.iloc[0]
    letter, word = row.extra_info["letter"], row.extra_info["word"]
    assert row.data_source == DATA_SOURCE and row.prompt[0]["content"] == make_prompt(letter, word)
    assert row.reward_model["ground_truth"] == str(word.count(letter))
    truth = [int(g["ground_truth"]) for g in test.reward_model]
    assert [int(r) - t for r, t in zip(sft_test.response, truth)] == [int(n) for n in sft_test.noisy]
    assert sft_train.noisy.sum() == round(0.6 * 400) and sft_test.noisy.sum() == round(0.6 * 50)
    clean = write_dataset(str(tmp_path / "clean"), 0, 400, 50, 100, sft_noise=0.0)
    assert [int(r) for r in pd.read_parquet(clean["sft_test"]).response] == truth
    assert pd.read_parquet(write_dataset(str(tmp_path / "again"), 0, 400, 50, 100)["train"]).equals(train)


@pytest.mark.parametrize(
    ("response", "expected"), [("3", 1.0), (" 3\n", 1.0), ("4", 0.0), ("03", 0.0), ("3 a", 0.0), ("", 0.0)]
)
def test_reward_is_exact_match(response, expected):
    assert char_count_reward_function(DATA_SOURCE, response, "3", extra_info={}) == expected


# ------------------------------------------------------------------------------------------------ pipeline
def _script_overrides(script: str, variables: dict) -> list[str]:
    return script_overrides(os.path.join(RECIPE, script), variables)


def test_scripts_run_sft_then_grpo_in_process(tmp_path, monkeypatch):
    import torch.distributed as dist

    from tests.trainer.ppo_e2e_utils import compose_config
    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.single_controller.inprocess import InProcessWorkerGroup
    from verl.trainer.fsdp_sft_trainer import run_sft
    from verl.trainer.main_ppo import build_trainer, prepare_config
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    write_dataset(str(tmp_path / "data"), num_train=128, num_test=8, num_rl_train=16)
    init = make_tiny_model_dir(str(tmp_path / "init"), hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)

    # stage 1: the SFT script's keys, 4 steps of 32 examples, in this process (world size 1, gloo)
    sft_keys = _script_overrides(
        "train_sft.sh",
        {"DATA_DIR": tmp_path / "data", "INIT_MODEL": init, "SAVE_DIR": tmp_path / "sft", "SFT_STEPS": 4},
    )
    assert len(sft_keys) > 15, sft_keys
    sft = OmegaConf.load(os.path.join(ROOT, "verl", "trainer", "config", "sft_trainer.yaml"))
    sft.merge_with(OmegaConf.from_dotlist(sft_keys + ["data.train_batch_size=32", "data.micro_batch_size_per_gpu=32"]))
    assert sft.trainer.total_training_steps == 4
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    run_sft(sft)
    sft_model = tmp_path / "sft" / "global_step_4"
    assert (sft_model / "model.safetensors").is_file() and not dist.is_initialized()

    # stage 2: the GRPO script's keys on the SFT model, 2 steps with one in-process worker
    grpo_keys = _script_overrides(
        "train_grpo.sh", {"DATA_DIR": tmp_path / "data", "SFT_MODEL": sft_model, "HERE": RECIPE}
    )
    assert f"custom_reward_function.path={RECIPE}/reward_function.py" in grpo_keys
    config = compose_config(
        grpo_keys
        + [
            "trainer.n_gpus_per_node=1",
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.n=4",
            "trainer.total_training_steps=2",
            "trainer.val_before_train=False",
            "trainer.test_freq=-1",
            "trainer.run_report=False",
            "trainer.resume_mode=disable",
            f"trainer.default_local_dir={tmp_path / 'grpo'}",
        ]
    )
    prepare_config(config)
    logged = []

    class Recording(RayPPOTrainer):
        def train_step(self, batch, timing_raw):
            batch, metrics = super().train_step(batch, timing_raw)
            logged.append(metrics)
            return batch, metrics

    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup, trainer_cls=Recording)
    trainer.init_workers()
    trainer.fit()
    if dist.is_initialized():
        dist.destroy_process_group()
    assert len(logged) == 2
    for metrics in logged:
        # (a few SFT steps leave every answer wrong: zero advantages, a zero gradient, which is right)
        assert math.isfinite(metrics["actor/pg_loss"]) and math.isfinite(metrics["actor/grad_norm"])
        # the recipe's exact-match reward: every score is 0 or 1
        assert metrics["critic/score/min"] in (0.0, 1.0) and metrics["critic/score/max"] in (0.0, 1.0)
