"""VERL_USE_MODELSCOPE=true: model ids resolve to ModelScope's local cache (fake cache folders here; the modelscope
package is not needed and is not imported for a cached model)."""

import importlib
import sys

import pytest

from verl.demo.tiny_model import make_tiny_model_dir
from verl.utils import fs


@pytest.fixture
def modelscope_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_USE_MODELSCOPE", "true")
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms"))
    monkeypatch.setitem(sys.modules, "modelscope", None)  # as if not installed: importing it raises ImportError
    return tmp_path / "ms"


def _cached(folder) -> str:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return str(folder)


@pytest.mark.parametrize(
    ("model_id", "layout"),
    [
        ("Qwen/Qwen3-0.6B", "models/Qwen/Qwen3-0.6B"),  # current modelscope releases
        ("Qwen/Qwen2.5-0.5B-Instruct", "hub/Qwen/Qwen2___5-0___5B-Instruct"),  # older ones: '.' spelt '___'
        ("LLM-Research/Meta-Llama-3.1-8B-Instruct", "LLM-Research/Meta-Llama-3.1-8B-Instruct"),
    ],
)
def test_model_id_resolves_to_the_cached_copy(modelscope_cache, model_id, layout):
    expected = _cached(modelscope_cache / layout)
    assert fs.copy_to_local(model_id) == expected  # modelscope is not imported (the fixture makes that raise)


def test_default_cache_is_under_home(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_USE_MODELSCOPE", "True")
    monkeypatch.delenv("MODELSCOPE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = _cached(tmp_path / ".cache/modelscope/hub/models/deepseek-ai/deepseek-llm-7b-chat")
    assert fs.copy_to_local("deepseek-ai/deepseek-llm-7b-chat") == expected


def test_local_paths_and_unset_variable_are_untouched(modelscope_cache, tmp_path, monkeypatch):
    _cached(modelscope_cache / "models/Qwen/Qwen3-0.6B")
    local = tmp_path / "Qwen"
    (local / "Qwen3-0.6B").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)  # a relative folder that exists wins over the cache
    assert fs.copy_to_local("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    assert fs.copy_to_local(str(local)) == str(local)
    monkeypatch.chdir(modelscope_cache.parent.parent)
    monkeypatch.setenv("VERL_USE_MODELSCOPE", "false")
    assert fs.copy_to_local("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"


def test_missing_model_without_modelscope_names_the_fix(modelscope_cache):
    with pytest.raises(FileNotFoundError, match="pip install modelscope") as err:
        fs.copy_to_local("Qwen/Qwen3-8B")
    assert "VERL_USE_MODELSCOPE=true" in str(err.value) and "Qwen/Qwen3-8B" in str(err.value)


def test_import_verl_does_not_need_modelscope(modelscope_cache):
    import verl

    importlib.reload(verl)  # the variable is set and modelscope is absent: importing still works


def test_config_check_reads_the_cached_model(modelscope_cache):
    from verl.trainer.config import ConfigError
    from verl.trainer.config.checks.ppo import _load_hf_config

    make_tiny_model_dir(str(modelscope_cache / "models/Qwen/Qwen3-0.6B"), family="qwen3")
    config = _load_hf_config("actor_rollout_ref.model.path", "Qwen/Qwen3-0.6B", False)
    assert config.model_type == "qwen3"
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.model.path='Qwen/Qwen3-8B'.*pip install modelscope"):
        _load_hf_config("actor_rollout_ref.model.path", "Qwen/Qwen3-8B", False)
