"""verl's public helpers that nothing in this project calls itself: users import them (the spec lists them), so each
is kept and its behaviour pinned here."""

import datetime
import os

import pytest
import torch
import torch.distributed as dist
from omegaconf import OmegaConf
from tensordict import TensorDict

from verl.utils import import_utils
from verl.utils.config import update_dict_with_config
from verl.utils.debug import performance, profile
from verl.utils.fs import copy_local_path_from_hdfs
from verl.utils.logger import aggregate_logger
from verl.utils.model import print_model_size
from verl.utils.py_functional import DynamicEnum, DynamicEnumMeta, list_of_dict_to_dict_of_list
from verl.utils.torch_functional import allgather_dict_tensors, broadcast_dict_tensor, check_device_is_available


@pytest.fixture
def single_rank_group():
    """A one-process gloo group (the collectives' semantics at world size 1)."""
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    from verl.single_controller.base.worker import WorkerHelper

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{WorkerHelper._get_free_port()}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


def test_dict_collectives_at_world_size_one(single_rank_group):
    tensors = {"b": torch.tensor([1.0, 2.0]), "a": torch.tensor([[3]])}
    broadcast_dict_tensor(tensors, src=0)
    assert torch.equal(tensors["b"], torch.tensor([1.0, 2.0]))
    gathered = allgather_dict_tensors(tensors, size=1)
    assert torch.equal(gathered["a"], torch.tensor([[3]])) and set(gathered) == {"a", "b"}
    td = TensorDict({"x": torch.arange(4).view(2, 2)}, batch_size=[2])
    out = allgather_dict_tensors(td, size=1)
    assert isinstance(out, TensorDict) and out.batch_size == torch.Size([2]) and torch.equal(out["x"], td["x"])


def test_check_device_is_available_refuses_without_an_accelerator():
    from verl.utils.device import is_accelerator_available

    if is_accelerator_available():
        with check_device_is_available():
            pass
    else:
        with pytest.raises(RuntimeError, match="needs an accelerator"), check_device_is_available():
            pass


def test_package_probes_answer_for_what_is_installed():
    assert import_utils.is_vllm_available() == (import_utils._has_module("vllm"))
    assert import_utils.is_trl_available() == import_utils._has_module("trl")
    for probe in ("is_megatron_core_available", "is_sglang_available", "is_nvtx_available"):
        assert isinstance(getattr(import_utils, probe)(), bool)


def test_update_dict_with_config_overwrites_shared_keys_only():
    values = {"lr": 1.0, "betas": (0.9, 0.99)}
    update_dict_with_config(values, OmegaConf.create({"lr": 0.5, "other": 3}))
    assert values == {"lr": 0.5, "betas": (0.9, 0.99)}


def test_copy_local_path_from_hdfs_returns_a_local_path_unchanged(tmp_path):
    assert copy_local_path_from_hdfs(str(tmp_path)) == str(tmp_path)


def test_list_of_dict_to_dict_of_list():
    assert list_of_dict_to_dict_of_list([{"a": 1, "b": 2}, {"a": 3, "b": 4}]) == {"a": [1, 3], "b": [2, 4]}
    assert list_of_dict_to_dict_of_list([]) == {}


def test_dynamic_enum_meta_gives_iteration_membership_and_lookup():
    class Color(DynamicEnum):
        pass

    red = Color.register("red")
    assert type(Color) is DynamicEnumMeta
    assert list(Color) == [red] and "RED" in Color and "red" in Color and red in Color and "blue" not in Color
    assert Color["red"] is red and Color.names() == ["RED"]


def test_mark_annotate_runs_the_function_inside_a_range():
    @profile.mark_annotate("adding")
    def add(a, b):
        return a + b

    assert add(2, 3) == 5 and add.__name__ == "add"


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
    with caplog.at_level(logging.INFO, logger="verl.test.helpers"):
        aggregate_logger.log_with_rank("message", rank=3, logger=logger)
    assert "message" in caplog.text and "3" in caplog.text


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
