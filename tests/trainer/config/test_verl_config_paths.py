"""verl's import paths of the config classes (verl.base_config, verl.workers.config, verl.utils.config) still
import, and give the very classes the config package uses."""

from __future__ import annotations

import verl.trainer.config as config_package
from verl.utils import omega_conf_to_dataclass


def test_base_config_path_gives_the_one_base_class():
    from verl.base_config import BaseConfig
    from verl.utils.config import BaseConfig as real

    assert BaseConfig is real
    assert issubclass(config_package.PPOConfig, BaseConfig)


def test_workers_config_path_gives_the_role_sections_of_the_config_package():
    import verl.workers.config as workers_config

    for name in workers_config.__all__:
        assert getattr(workers_config, name) is getattr(config_package, name), name
    actor = omega_conf_to_dataclass({"ppo_mini_batch_size": 8, "clip_ratio": 0.3}, workers_config.ActorConfig)
    assert (actor.ppo_mini_batch_size, actor.clip_ratio, actor["clip_ratio"]) == (8, 0.3, 0.3)


def test_utils_config_keeps_verls_helpers():
    from verl.utils.config import update_dict_with_config

    target = {"lr": 1.0, "steps": 1}
    update_dict_with_config(target, config_package.OptimConfig(lr=0.5))
    assert target == {"lr": 0.5, "steps": 1}
