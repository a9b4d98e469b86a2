"""verl's public helpers that nothing in this project calls itself: users import them (the spec lists them), so each
is kept and its behaviour pinned here."""

import datetime
import os
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from omegaconf import OmegaConf
from tensordict import TensorDict

from verl.utils import import_utils
from verl.utils.config import update_dict_with_config
from verl.utils.debug import performance, profile
from verl.utils.fs import copy_local_path_from_hdfs
from verl.utils.logger import aggregate_logger
from verl.utils.model import print_model_size
from verl.utils.py_functional import DynamicEnum, DynamicEnumMeta
from verl.utils.torch_functional import allgather_dict_tensors, broadcast_dict_tensor, check_device_is_available


def _dict_collectives_worker(rank, init_file, result_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    # rank 1's values must win the broadcast; keys are inserted in a different order on each rank
    # (the helpers walk sorted keys so the collectives still pair up)
    sent = {"b": torch.tensor([1.0, 2.0]) * (rank + 1), "a": torch.tensor([[3]]) * (rank + 1)}
    if rank == 1:
        sent = dict(reversed(sent.items()))
    broadcast_dict_tensor(sent, src=1)
    local = {"x": torch.tensor([[rank, 10 + rank]]), "y": torch.tensor([rank * 1.5])}
    gathered = allgather_dict_tensors(local, size=2)
    by_column = allgather_dict_tensors({"x": torch.tensor([[rank], [10 + rank]])}, size=2, dim=1)
    td = TensorDict({"x": torch.full((2, 3), rank)}, batch_size=[2])
    gathered_td = allgather_dict_tensors(td, size=2)
    if rank == 0:
        torch.save(
            {
                "sent": sent,
                "gathered": gathered,
                "by_column": by_column,
                "td": gathered_td.to_dict(),
                "td_batch": list(gathered_td.batch_size),
            },
            result_file,
        )
    dist.destroy_process_group()


def test_dict_collectives_over_two_ranks(tmp_path):
    result = tmp_path / "out.pt"
    mp.spawn(_dict_collectives_worker, args=(str(tmp_path / "init"), str(result)), nprocs=2, join=True)
    out = torch.load(result)
    # rank 0 now holds rank 1's tensors (multiplied by 2)
    assert torch.equal(out["sent"]["b"], torch.tensor([2.0, 4.0])) and torch.equal(
        out["sent"]["a"], torch.tensor([[6]])
    )
    assert torch.equal(out["gathered"]["x"], torch.tensor([[0, 10], [1, 11]]))
    assert torch.equal(out["gathered"]["y"], torch.tensor([0.0, 1.5]))
    assert torch.equal(out["by_column"]["x"], torch.tensor([[0, 1], [10, 11]]))
    assert out["td_batch"] == [4]
    assert torch.equal(out["td"]["x"], torch.tensor([[0] * 3, [0] * 3, [1] * 3, [1] * 3]))


def test_check_device_is_available_refuses_without_an_accelerator():
    from verl.utils.device import is_accelerator_available

    if is_accelerator_available():
        with check_device_is_available():
            pass
    else:
        with pytest.raises(RuntimeError, match="needs an accelerator"), check_device_is_available():
            pass


_PROBES = {
    "is_megatron_core_available": "megatron.core",
    "is_vllm_available": "vllm",
    "is_sglang_available": "sglang",
    "is_nvtx_available": "nvtx",
    "is_trl_available": "trl",
}


@pytest.mark.parametrize("probe_name", sorted(_PROBES))
def test_package_probe_follows_whether_the_module_can_be_found(probe_name, monkeypatch):
    import importlib.machinery
    import types

    probe, module_name = getattr(import_utils, probe_name), _PROBES[probe_name]
    present = types.ModuleType(module_name)
    present.__spec__ = importlib.machinery.ModuleSpec(module_name, None)
    try:
        probe.cache_clear()
        monkeypatch.setitem(sys.modules, module_name, present)
        assert probe() is True
        probe.cache_clear()
        monkeypatch.setitem(sys.modules, module_name, None)  # what `import` treats as "not installed"
        assert probe() is False
        assert probe() is False and probe.cache_info().hits == 1  # answered from the cache
    finally:
        monkeypatch.undo()
        probe.cache_clear()


def test_update_dict_with_config_overwrites_shared_keys_only():
    values = {"lr": 1.0, "betas": (0.9, 0.99)}
    update_dict_with_config(values, OmegaConf.create({"lr": 0.5, "other": 3}))
    assert values == {"lr": 0.5, "betas": (0.9, 0.99)}


def test_copy_local_path_from_hdfs_returns_a_local_path_unchanged(tmp_path):
    assert copy_local_path_from_hdfs(str(tmp_path)) == str(tmp_path)


def test_copy_local_path_from_hdfs_copies_a_remote_path_once_into_the_cache(tmp_path, monkeypatch):
    import hashlib

    from verl.utils import fs

    copies = []

    def fake_copy(src, dst):
        copies.append((src, dst))
        with open(dst, "w") as f:
            f.write("weights")

    monkeypatch.setattr(fs, "copy", fake_copy)
    src = "hdfs://cluster/models/model.bin"
    expected = tmp_path / hashlib.md5(src.encode()).hexdigest() / "model.bin"
    assert copy_local_path_from_hdfs(src, cache_dir=str(tmp_path)) == str(expected)
    assert copy_local_path_from_hdfs(src, cache_dir=str(tmp_path)) == str(expected)  # cached: no second copy
    assert copies == [(src, str(expected))] and expected.read_text() == "weights"


def test_list_of_dict_to_dict_of_list():
    # verl users import it from verl.protocol, where verl defines it
    from verl.protocol import list_of_dict_to_dict_of_list

    assert list_of_dict_to_dict_of_list([{"a": 1, "b": 2}, {"a": 3, "b": 4}]) == {"a": [1, 3], "b": [2, 4]}
    assert list_of_dict_to_dict_of_list([]) == {}
    with pytest.raises(KeyError):  # every dict needs the first one's keys
        list_of_dict_to_dict_of_list([{"a": 1}, {"b": 2}])


def test_dynamic_enum_meta_gives_iteration_membership_and_lookup():
    class Color(DynamicEnum):
        pass

    red = Color.register("red")
    assert type(Color) is DynamicEnumMeta
    assert list(Color) == [red] and "RED" in Color and "red" in Color and red in Color and "blue" not in Color
    assert Color["red"] is red and Color.names() == ["RED"]


def test_mark_annotate_wraps_each_call_in_a_named_range():
    from verl.utils.device import is_cuda_available

    if is_cuda_available:
        pytest.skip("on CUDA the range is an NVTX range, which torch.profiler does not record")

    @profile.mark_annotate("adding")
    def add(a, b):
        return a + b

    @profile.mark_annotate()
    def failing():
        raise ValueError("inside")

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        assert add(2, 3) == 5 and add(1, 1) == 2
        with pytest.raises(ValueError, match="inside"):
            failing()
    names = [event.name for event in prof.events()]
    assert names.count("adding") == 2 and names.count("failing") == 1  # default name: the function's own
    assert add.__name__ == "add"


def test_print_helpers(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    print_model_size(torch.nn.Linear(10, 10), name="probe")
    performance.log_print("hello")
    aggregate_logger.print_rank_0("rank zero")
    aggregate_logger.print_with_rank("ranked", rank=1)
    aggregate_logger.print_with_rank("hidden", rank=1, log_only_rank_0=True)
    aggregate_logger.print_with_rank_and_timer("timed", rank=0)
    out = capsys.readouterr().out
    assert "probe contains 110.00 parameters" in out
    assert f"[{datetime.date.today():%Y-%m-%d}" in out and "test_public_helpers.py" in out and "hello" in out
    assert "rank zero" in out and "[Rank 1] ranked" in out and "hidden" not in out and "[Rank 0] timed" in out
    monkeypatch.setenv("RANK", "1")
    print_model_size(torch.nn.Linear(2, 2))
    assert capsys.readouterr().out == ""  # only rank 0 prints the model size
    assert os.environ["RANK"] == "1"


def test_log_with_rank_logs_with_the_rank(caplog):
    import logging

    logger = logging.getLogger("verl.test.helpers")
    with caplog.at_level(logging.DEBUG, logger="verl.test.helpers"):
        aggregate_logger.log_with_rank("message", rank=3, logger=logger)
        aggregate_logger.log_with_rank("quiet", rank=3, logger=logger, log_only_rank_0=True)
        aggregate_logger.log_with_rank("warned", rank=0, logger=logger, level=logging.WARNING, log_only_rank_0=True)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "[Rank 3] message"),
        (logging.WARNING, "[Rank 0] warned"),
    ]


def test_run_reward_scoring_scores_in_processes():
    from verl.workers.reward_manager.prime import run_reward_scoring

    def exact(data_source, completion, ground_truth, extra_info=None):
        return float(completion == ground_truth)

    scores = run_reward_scoring(exact, ["a", "b"], ["a", "c"], ["toy", "toy"], num_processes=2, timeout=30)
    assert list(scores) == [1.0, 0.0]


def test_extract_pg_from_exist_reuses_placement_groups(ray_cluster):
    from verl.single_controller.ray.base import RayResourcePool, extract_pg_from_exist

    source = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
    pgs = extract_pg_from_exist({"actor": source}, ["actor"], RayResourcePool([2], use_gpu=False))
    assert pgs == source.get_placement_groups()
    for pg in pgs:  # the session's cluster has 4 CPUs: give them back
        ray_cluster.util.remove_placement_group(pg)


def test_merge_resource_pool_holds_both_pools_nodes_and_placement_groups(ray_cluster):
    from verl.single_controller.ray.base import RayResourcePool, merge_resource_pool

    a = RayResourcePool([1], use_gpu=False, name_prefix="a", max_colocate_count=1)
    b = RayResourcePool([1], use_gpu=False, name_prefix="b", max_colocate_count=1)
    merged = merge_resource_pool(a, b)
    assert merged.store == [1, 1] and merged.world_size == 2 and merged.name_prefix == "a_b"
    assert merged.get_placement_groups() == a.get_placement_groups() + b.get_placement_groups()
    with pytest.raises(AssertionError, match="use_gpu"):
        merge_resource_pool(a, RayResourcePool([1], use_gpu=True, max_colocate_count=1))
    for pg in merged.get_placement_groups():
        ray_cluster.util.remove_placement_group(pg)
