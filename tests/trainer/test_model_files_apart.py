"""model.tokenizer_path and model.hf_config_path through a whole run's setup: the driver's dataset, the actor and the
critic read the tokenizer and config.json from folders of their own, and the weights' folder needs neither. GAE on
the HF rollout, the in-process worker group (no Ray), one training step."""

from __future__ import annotations

import shutil

import torch.distributed as dist
from transformers import AutoTokenizer

from tests.trainer.ppo_e2e_utils import base_overrides, compose_config, make_workspace, write_reward_fn

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} (tokenizer folder)\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _apart(model: str, root) -> tuple[str, str, str]:
    """The weights' folder without config.json or tokenizer, a folder with the config, one with the tokenizer."""
    weights, config, tokenizer_dir = root / "weights", root / "config", root / "tokenizer"
    shutil.copytree(model, weights)
    config.mkdir()
    shutil.move(weights / "config.json", config / "config.json")
    tokenizer = AutoTokenizer.from_pretrained(model)
    for name in list(weights.iterdir()):
        if name.name.startswith(("tokenizer", "special_tokens", "chat_template", "vocab", "merges")):
            name.unlink()
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(tokenizer_dir)
    return str(weights), str(config), str(tokenizer_dir)


def test_tokenizer_and_config_folders_of_their_own(tmp_path):
    from verl.single_controller.inprocess import InProcessWorkerGroup
    from verl.trainer.main_ppo import build_trainer, prepare_config

    ws = make_workspace(tmp_path)
    actor_weights, actor_config, tokenizer_dir = _apart(ws["model"], tmp_path / "actor")
    critic_weights, critic_config, _ = _apart(ws["critic"], tmp_path / "critic")
    config = compose_config(
        base_overrides(ws, "gae", steps=1)
        + [
            f"actor_rollout_ref.model.path={actor_weights}",
            f"actor_rollout_ref.model.hf_config_path={actor_config}",
            f"actor_rollout_ref.model.tokenizer_path={tokenizer_dir}",
            f"critic.model.path={critic_weights}",
            f"critic.model.hf_config_path={critic_config}",
            # verl v0.4's default is the policy's path (here the weights' folder, with no tokenizer)
            f"critic.model.tokenizer_path={tokenizer_dir}",
            f"custom_reward_function.path={write_reward_fn(tmp_path)}",
            "trainer.n_gpus_per_node=1",  # the in-process worker group runs one worker
            "data.max_prompt_length=64",  # the template's marker makes the prompts longer
            "trainer.run_report=False",
            "trainer.resume_mode=disable",
        ]
    )
    prepare_config(config)
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
    try:
        assert trainer.tokenizer.chat_template == TEMPLATE
        prompt = trainer.tokenizer.decode(trainer.train_dataset[0]["input_ids"], skip_special_tokens=False)
        assert "(tokenizer folder)" in prompt  # the driver's data went through that tokenizer's template
        trainer.init_workers()
        actor = trainer.actor_rollout_wg.workers[0].worker_dict["actor_rollout"]
        critic = trainer.critic_wg.workers[0].worker_dict["critic"]
        assert actor.tokenizer.chat_template == critic.tokenizer.chat_template == TEMPLATE
        assert actor.hf_config.architectures == ["Qwen2ForCausalLM"]
        trainer.fit()
        assert trainer.global_steps >= 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
