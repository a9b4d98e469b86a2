"""FSDP2 on CPU/gloo: sharded training step equals a single-process step; full state dict gather; helpers."""

import copy
import os

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from tests.gloo_ranks import spawn_gloo_ranks
from verl.utils.fsdp_utils import (
    clip_grad_norm_,
    fsdp_version,
    get_fsdp_full_state_dict,
    get_fsdp_wrap_policy,
    get_init_weight_context_manager,
    resolve_fsdp_version,
    wrap_model_for_training,
)

WORLD = 2
LR = 0.5


def _tiny_config() -> Qwen2Config:
    return Qwen2Config(
        vocab_size=128,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        attn_implementation="sdpa",
    )


def _make_model(seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(_tiny_config())


def _batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 128, (4, 12), generator=g)


def _loss(model, ids):
    return model(input_ids=ids, labels=ids, use_cache=False).loss


def _reference_step(max_norm: float):
    """One SGD step on the whole batch in a single process: returns (grad norm, updated state dict)."""
    model = _make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    _loss(model, _batch()).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    return norm, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _worker(rank: int, max_norm: float, out_path: str):
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
    # Non-zero ranks build meta parameters; rank 0's real weights are broadcast by the wrap helper.
    with get_init_weight_context_manager(use_meta_tensor=True, mesh=mesh)():
        model = _make_model()
    if rank != 0:
        assert next(model.parameters()).is_meta
    model = wrap_model_for_training(model, "fsdp", mesh, fsdp_config={"reshard_after_forward": True})
    assert fsdp_version(model) == 2
    before = get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=True)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ids = _batch()
    # Each rank takes half the batch; FSDP averages gradients over the shard group.
    local = ids.chunk(WORLD)[rank]
    _loss(model, local).backward()
    norm = clip_grad_norm_(model, max_norm)
    opt.step()
    after = get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=True)
    if rank == 0:
        torch.save({"before": before, "after": after, "norm": norm}, out_path)
    else:
        assert before == {} and after == {}


def test_fsdp2_two_process_step_equals_single_process(tmp_path):
    max_norm = 0.05  # below the gradient norm, so clipping is exercised
    out = str(tmp_path / "state.pt")
    spawn_gloo_ranks(_worker, WORLD, max_norm, out)
    got = torch.load(out)
    init = _make_model().state_dict()
    assert set(got["before"]) == set(init)
    for k, v in init.items():
        torch.testing.assert_close(got["before"][k], v, rtol=0, atol=0)
    # The loss is a token mean per half; both halves have the same token count, so the mean of the two
    # half-gradients equals the whole-batch gradient.
    ref_norm, ref_state = _reference_step(max_norm)
    assert ref_norm > max_norm
    torch.testing.assert_close(got["norm"], ref_norm, rtol=1e-4, atol=1e-6)
    changed = 0
    for k, v in ref_state.items():
        torch.testing.assert_close(got["after"][k], v, rtol=1e-4, atol=1e-5)
        changed += int(not torch.equal(got["after"][k], init[k]))
    assert changed > 0


def test_resolve_fsdp_version_on_cpu():
    assert resolve_fsdp_version("fsdp2") == 2
    from verl.utils.device import is_accelerator_available

    assert resolve_fsdp_version("fsdp") == (1 if is_accelerator_available() else 2)
    with pytest.raises(ValueError, match="strategy='megatron'"):
        resolve_fsdp_version("megatron")


def test_cpu_compute_dtype_defaults_to_the_stored_dtype(monkeypatch):
    # a model loaded in bf16 (fsdp_config.model_dtype=bf16) computes in bf16 on CPU, not upcast to fp32 per forward
    import verl.utils.fsdp_utils as fu

    monkeypatch.setattr(fu, "is_accelerator_available", lambda: False)
    assert fu._mixed_precision_dtypes(None, torch.bfloat16)[0] == torch.bfloat16
    assert fu._mixed_precision_dtypes({}, torch.float32) == (torch.float32,) * 3
    assert fu._mixed_precision_dtypes({"param_dtype": "fp32"}, torch.bfloat16)[0] == torch.float32  # configured wins
    monkeypatch.setattr(fu, "is_accelerator_available", lambda: True)
    assert fu._mixed_precision_dtypes(None, torch.float32)[0] == torch.bfloat16  # verl's accelerator default
    # FSDP2: no policy when computing in the stored dtype (inputs uncast); bf16 compute keeps fp32 gradient reduction
    plain = fu._mixed_precision_policy(torch.float32, torch.float32, torch.float32)
    assert plain.param_dtype is None and plain.reduce_dtype is None
    mixed = fu._mixed_precision_policy(torch.bfloat16, torch.float32, torch.float32)
    assert mixed.param_dtype == torch.bfloat16 and mixed.reduce_dtype == torch.float32


def test_wrap_policy_and_plain_clip():
    model = _make_model()
    assert get_fsdp_wrap_policy(model, {"disable": True}) is None
    assert get_fsdp_wrap_policy(model, {}) is not None
    with pytest.raises(Exception, match="NoSuchLayer"):
        get_fsdp_wrap_policy(model, {"transformer_layer_cls_to_wrap": ["NoSuchLayer"]})
    assert fsdp_version(model) == 0
    twin = copy.deepcopy(model)
    ids = _batch()
    _loss(model, ids).backward()
    _loss(twin, ids).backward()
    norm = clip_grad_norm_(model, 0.01)
    ref = torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.01)
    torch.testing.assert_close(norm, ref)
    full = get_fsdp_full_state_dict(model)
    assert set(full) == set(model.state_dict())


def test_meta_init_keeps_buffers_real():
    import verl.utils.fsdp_utils as fu

    with fu._meta_parameters():
        model = _make_model()
    assert all(p.is_meta for p in model.parameters())
    assert all(not b.is_meta for b in model.buffers())


def test_cpu_workers_share_the_hosts_cores(monkeypatch):

    import torch

    from verl.utils import distributed

    # an in-process vLLM engine built by an earlier test replaces torch.set_num_threads with a no-op; a worker
    # process calls use_cpu_share before any engine is built
    monkeypatch.setattr(torch, "set_num_threads", torch._C.set_num_threads)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert [distributed.cpu_share(n) for n in (1, 2, 3, 32)] == [16, 8, 5, 1]
    before = torch.get_num_threads()
    monkeypatch.delenv("VERL_HOST_WORKERS", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        distributed.use_cpu_share()
        assert torch.get_num_threads() == 2 and os.environ["OMP_NUM_THREADS"] == "2"
        # a group of one process beside another pool's (a standalone rollout): the share of all the host's workers
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
        monkeypatch.setenv("VERL_HOST_WORKERS", "16")
        assert distributed.use_cpu_share() == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_threads_a_worker_starts_run_with_its_cpu_share(monkeypatch):
    """OpenMP's thread count is per thread: a thread the worker starts (the agent loop's, which drives the rollout
    engine) runs at the process default until it adopts the worker's share; vLLM's CPU attention refuses a call whose
    thread count changes inside it."""
    import ctypes
    import threading

    import torch

    from verl.utils import distributed

    # torch's own copy: other packages (a wheel's vendored copy, the system's) may load another libgomp beside it
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    maps = [line.split()[-1] for line in open("/proc/self/maps")] if os.path.exists("/proc/self/maps") else []
    gomp = next((path for path in maps if path.startswith(torch_lib) and "libgomp" in path), None)
    if gomp is None:
        pytest.skip("torch is not built with GNU OpenMP here")
    omp_get_max_threads = ctypes.CDLL(gomp).omp_get_max_threads

    def in_new_thread(adopt: bool) -> int:
        seen = []

        def run():
            if adopt:
                distributed.adopt_worker_threads()
            seen.append(omp_get_max_threads())

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(30)
        return seen[0]

    monkeypatch.setattr(torch, "set_num_threads", torch._C.set_num_threads)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    default = in_new_thread(adopt=False)
    # a share other than the new threads' OpenMP default, so adopting it shows
    monkeypatch.setenv("VERL_HOST_WORKERS", "16" if default != 1 else "8")
    before = torch.get_num_threads()
    try:
        share = distributed.use_cpu_share()
        assert share != default
        assert in_new_thread(adopt=False) == default
        assert in_new_thread(adopt=True) == share
    finally:
        torch.set_num_threads(before)


def test_fsdp2_param_groups_across_torch_releases():
    """torch >= 2.12 keeps a list of FSDP2 parameter groups, 2.11 (the GPU machine's) one group or None."""
    from types import SimpleNamespace

    from verl.utils.fsdp_utils import _fsdp2_param_groups

    def module(**state):
        return SimpleNamespace(_get_fsdp_state=lambda: SimpleNamespace(**state))

    assert _fsdp2_param_groups(module(_fsdp_param_groups=("a", "b"))) == ["a", "b"]
    assert _fsdp2_param_groups(module(_fsdp_param_group="a")) == ["a"]
    assert _fsdp2_param_groups(module(_fsdp_param_group=None)) == []


def _accumulation_worker(rank: int, out_path: str):
    torch.set_num_threads(1)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from verl.utils.fsdp_utils import FSDP2Accumulation

    counts = {"all_gather_single": 0, "reduce_scatter_single": 0}  # FSDP2's collectives (torch 2.13)
    for name in counts:
        inner = getattr(dist, name)

        def counted(*args, _name=name, _inner=inner, **kwargs):
            counts[_name] += 1
            return _inner(*args, **kwargs)

        setattr(dist, name, counted)
    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
    model = wrap_model_for_training(_make_model(), "fsdp", mesh, fsdp_config={"reshard_after_forward": True})
    micro_batches = _batch().chunk(WORLD)[rank].chunk(2)  # two micro batches of one row per rank
    results = {}
    for mode in ("default", "accumulate", "default"):  # the last run: everything restored
        accumulation = FSDP2Accumulation(model) if mode == "accumulate" else None
        model.zero_grad(set_to_none=True)
        for name in counts:
            counts[name] = 0
        for index, ids in enumerate(micro_batches):
            if accumulation is not None:
                accumulation.micro_batch(last=index == len(micro_batches) - 1)
            (_loss(model, ids) / len(micro_batches)).backward()
        if accumulation is not None:
            accumulation.finish()
        grads = [p.grad.to_local().clone() for p in model.parameters()]
        results.setdefault(mode, []).append((dict(counts), grads))
    if rank == 0:
        torch.save(results, out_path)


def test_fsdp2_accumulation_gathers_and_reduces_once_per_mini_batch(tmp_path):
    out = str(tmp_path / "counts.pt")
    spawn_gloo_ranks(_accumulation_worker, WORLD, out)
    got = torch.load(out)
    (default, default_grads), (again, again_grads) = got["default"]
    ((few, few_grads),) = got["accumulate"]
    # default: each micro batch gathers in its forward and again in the backward, and reduce-scatters
    assert default == again and default["reduce_scatter_single"] == 2 * few["reduce_scatter_single"] > 0
    assert 0 < few["all_gather_single"] < default["all_gather_single"]
    for a, b, c in zip(default_grads, few_grads, again_grads, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(c, a, rtol=0, atol=0)
