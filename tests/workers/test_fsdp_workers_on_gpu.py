"""The actor worker on the accelerator: bf16 FSDP1/FSDP2 updates against fp32 on CPU, offload, checkpoint resume.

Every run is a fresh process (``tests/workers/gpu_actor_steps.py``). Skipped without an accelerator unless
``VERL_GPU_CHECK_DEVICE=cpu`` (then the "device" run is CPU with bf16 mixed precision, FSDP1 is skipped, and
the offload checks that need device memory are not made).

Tolerances, on the response tokens of an 8-sequence batch of a random 2-layer Qwen2 (hidden 128, vocab ~300):
* bf16 (device) vs fp32 (CPU) log-probs, before and after one AdamW step: mean |diff| <= 0.02, max <= 0.1
  (bf16 keeps 8 mantissa bits: ~0.4% of a log-prob of about -5.6; measured on CPU bf16: mean 0.001, max 0.005);
* the change one update makes to the log-probs (mean |change| ~0.5): cosine(device, CPU) >= 0.98;
* the update's grad norm: relative difference <= 5%;
* Liger's kernels on vs off (both bf16 on the device): the same tolerances as bf16 vs fp32, since Liger computes
  RMSNorm, rotary embedding and SwiGLU in other kernels with their own rounding;
* offload on vs off, and a resumed run vs the uninterrupted one: max |diff| <= 1e-3 (the same arithmetic on the
  same device; only atomics in backward kernels may reorder sums), while a run that did not load the checkpoint
  differs by more than 0.05.
"""

import pytest
import torch

from tests.workers.gpu_actor_steps import run_steps
from verl.models.transformers.liger import liger_unavailable_reason
from verl.utils.device import get_device_name, is_accelerator_available

ON_DEVICE = is_accelerator_available()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from verl.demo.tiny_model import make_tiny_model_dir

    path = tmp_path_factory.mktemp("gpu_actor") / "model"
    return make_tiny_model_dir(
        str(path), hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256
    )


@pytest.fixture(scope="module")
def cpu_fp32(model_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ref") / "cpu_fp32.pt")
    result = run_steps(out, "--model", model_dir, "--param-dtype", "fp32", cpu_reference=True)
    assert result["device"] == "cpu"
    return result


def _response(result, key) -> torch.Tensor:
    return result[key][result["response_mask"].bool()]


def _close(got, want, mean_tol, max_tol, what):
    diff = (got - want).abs()
    assert diff.mean() <= mean_tol and diff.max() <= max_tol, (
        f"{what}: mean |diff| {diff.mean():.4g} (<= {mean_tol}), max {diff.max():.4g} (<= {max_tol})"
    )


@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp"])
def test_bf16_update_matches_fp32_on_cpu(strategy, model_dir, cpu_fp32, tmp_path):
    if strategy == "fsdp" and not ON_DEVICE:
        pytest.skip("FSDP1 needs an accelerator (on CPU strategy=fsdp runs FSDP2)")
    got = run_steps(str(tmp_path / "dev.pt"), "--model", model_dir, "--strategy", strategy, "--param-dtype", "bf16")
    assert got["device"] == get_device_name()
    for key in ("log_probs_before", "log_probs_after"):
        _close(_response(got, key), _response(cpu_fp32, key), 0.02, 0.1, f"{strategy} bf16 vs CPU fp32 {key}")
    change_dev = _response(got, "log_probs_after") - _response(got, "log_probs_before")
    change_cpu = _response(cpu_fp32, "log_probs_after") - _response(cpu_fp32, "log_probs_before")
    assert change_cpu.abs().mean() > 0.05, "the update barely moved the CPU policy: the comparison would prove nothing"
    cosine = torch.nn.functional.cosine_similarity(change_dev, change_cpu, dim=0)
    assert cosine >= 0.98, f"{strategy}: the bf16 update moved the log-probs differently (cosine {cosine:.4f})"
    norm_dev, norm_cpu = got["metrics"]["actor/grad_norm"][0], cpu_fp32["metrics"]["actor/grad_norm"][0]
    assert abs(norm_dev - norm_cpu) <= 0.05 * norm_cpu, (strategy, norm_dev, norm_cpu)


@pytest.mark.skipif(
    liger_unavailable_reason(get_device_name()) is not None,
    reason=f"Liger's kernels cannot run here: {liger_unavailable_reason(get_device_name())}",
)
def test_liger_kernels_train_the_same_model(model_dir, tmp_path):
    """``actor_rollout_ref.model.use_liger=True`` patches the actor (Liger's modules are in it) and changes neither
    its log-probs nor its update beyond bf16 rounding."""
    plain = run_steps(str(tmp_path / "plain.pt"), "--model", model_dir, "--param-dtype", "bf16")
    liger = run_steps(str(tmp_path / "liger.pt"), "--model", model_dir, "--param-dtype", "bf16", "--liger")
    assert any(name.startswith("Liger") for name in liger["module_names"]), liger["module_names"]
    assert not any(name.startswith("Liger") for name in plain["module_names"])
    for key in ("log_probs_before", "log_probs_after"):
        _close(_response(liger, key), _response(plain, key), 0.02, 0.1, f"Liger vs plain {key}")
    norms = (liger["metrics"]["actor/grad_norm"][0], plain["metrics"]["actor/grad_norm"][0])
    assert abs(norms[0] - norms[1]) <= 0.05 * norms[1], norms


def test_param_and_optimizer_offload_round_trip(model_dir, tmp_path):
    plain = run_steps(str(tmp_path / "plain.pt"), "--model", model_dir)
    offload = run_steps(str(tmp_path / "offload.pt"), "--model", model_dir, "--offload")
    for key in ("log_probs_before", "log_probs_after"):
        _close(_response(offload, key), _response(plain, key), 1e-4, 1e-3, f"offload vs resident {key}")
    device = get_device_name()
    # between calls the offloaded state lives in host memory; without offload it stays on the device
    assert offload["between_calls"]["param_devices"] == ["cpu"]
    assert offload["after_update"]["param_devices"] == ["cpu"]
    assert offload["after_update"]["optim_devices"] == ["cpu"]
    assert plain["after_update"]["param_devices"] == [device]
    assert plain["after_update"]["optim_devices"] == [device]
    if ON_DEVICE:
        # parameters (fp32) and two AdamW moments no longer occupy device memory. The comparison is against what
        # they occupy, not against all allocated memory: on the GPU, cuBLAS's workspaces (~64 MiB, measured on an
        # H200) come from the same allocator and dwarf this tiny model's ~4.5 MB.
        state = plain["after_update"]["state_device_bytes"]
        resident, offloaded = plain["after_update"]["allocated_bytes"], offload["after_update"]["allocated_bytes"]
        assert state > 0 and offload["after_update"]["state_device_bytes"] == 0
        assert resident - offloaded >= 0.8 * state, (
            f"offload freed {resident - offloaded} B of device memory; parameters and optimizer state hold {state} B"
        )


def test_checkpoint_save_and_resume_in_a_new_process(model_dir, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    uninterrupted = run_steps(str(tmp_path / "save.pt"), "--model", model_dir, "--mode", "save", "--ckpt", ckpt)
    resumed = run_steps(str(tmp_path / "resume.pt"), "--model", model_dir, "--mode", "resume", "--ckpt", ckpt)
    fresh = run_steps(str(tmp_path / "fresh.pt"), "--model", model_dir, "--mode", "resume", "--no-load")
    want = _response(uninterrupted, "log_probs_after")
    _close(_response(resumed, "log_probs_after"), want, 1e-4, 1e-3, "resumed vs uninterrupted")
    assert (_response(fresh, "log_probs_after") - want).abs().max() > 0.05, "the checkpoint made no difference"
    norms = (resumed["metrics_second"]["actor/grad_norm"][0], uninterrupted["metrics_second"]["actor/grad_norm"][0])
    assert abs(norms[0] - norms[1]) <= 1e-3 * norms[1], norms
