"""builtin:// paths: resolution into verl/assets, in-place config rewriting, errors that name the key."""

import os

import pytest
from omegaconf import OmegaConf

from verl.demo.assets import ASSET_ROOT, is_builtin_path, resolve_builtin_path, resolve_builtin_paths


def test_resolves_into_the_asset_folder_and_leaves_other_paths_alone():
    path = resolve_builtin_path("builtin://arithmetic/train.parquet")
    assert path == os.path.join(ASSET_ROOT, "arithmetic", "train.parquet") and os.path.isfile(path)
    for other in ("~/data/train.parquet", "/abs/x", "hdfs://a/b", "Qwen/Qwen2.5-0.5B"):
        assert not is_builtin_path(other)
        assert resolve_builtin_path(other) == other
    assert not is_builtin_path(None) and not is_builtin_path(3)


def test_missing_asset_names_the_key_and_how_to_rebuild():
    with pytest.raises(FileNotFoundError, match=r"actor_rollout_ref\.model\.path=.*build_default_model"):
        resolve_builtin_path("builtin://default_model/nope.safetensors", "actor_rollout_ref.model.path")
    with pytest.raises(FileNotFoundError, match="arithmetic.py"):
        resolve_builtin_path("builtin://arithmetic/nope.parquet", "data.train_files")


@pytest.mark.parametrize("bad", ["builtin://", "builtin://../setup.py", "builtin://arithmetic/../../x"])
def test_paths_leaving_the_asset_folder_are_refused(bad):
    with pytest.raises(ValueError, match="data.val_files"):
        resolve_builtin_path(bad, "data.val_files")


def test_config_rewrite_in_place_keeps_interpolations_structure_and_flags():
    config = OmegaConf.create(
        {
            "data": {"train_files": ["builtin://arithmetic/train.parquet", "/x.parquet"], "val_files": None},
            "model": {"path": "builtin://default_model", "missing": "???"},
            "critic": {"tokenizer_path": "${model.path}", "path": "~/models/m"},
        }
    )
    OmegaConf.set_struct(config, True)
    OmegaConf.set_readonly(config, True)
    assert resolve_builtin_paths(config) is config
    assert list(config.data.train_files) == [os.path.join(ASSET_ROOT, "arithmetic", "train.parquet"), "/x.parquet"]
    assert config.model.path == os.path.join(ASSET_ROOT, "default_model")
    assert OmegaConf.is_interpolation(config.critic, "tokenizer_path")
    assert config.critic.tokenizer_path == config.model.path and config.critic.path == "~/models/m"
    assert OmegaConf.is_missing(config.model, "missing") and config.data.val_files is None
    assert OmegaConf.is_readonly(config) and OmegaConf.is_struct(config)


def test_demo_config_points_at_the_shipped_assets():
    from hydra import compose, initialize_config_dir

    import verl
    from verl.demo.default_run import apply_builtin_demo

    with initialize_config_dir(os.path.join(os.path.dirname(verl.__file__), "trainer", "config"), version_base=None):
        config = compose(config_name="ppo_trainer")
    apply_builtin_demo(config, set())
    resolve_builtin_paths(config)
    assert config.data.train_files == os.path.join(ASSET_ROOT, "arithmetic", "train.parquet")
    assert config.actor_rollout_ref.model.path == os.path.join(ASSET_ROOT, "default_model")
    assert config.critic.model.tokenizer_path == config.actor_rollout_ref.model.path
