"""device, fs, py_functional, ray_utils, import_utils and config helpers of the foundation layer."""

import dataclasses
import os
import time

import pytest
from omegaconf import OmegaConf

from verl.utils import device, fs, omega_conf_to_dataclass
from verl.utils.import_utils import load_extern_type
from verl.utils.py_functional import DynamicEnum, append_to_dict, timeout_limit, union_two_dict
from verl.utils.ray_utils import parallel_put, ray_noset_visible_devices


def test_device_on_cpu_box():
    if device.is_cuda_available or device.is_npu_available:
        pytest.skip("CPU-only expectations")
    assert device.get_device_name() == "cpu"
    assert device.get_nccl_backend() == "gloo" and device.get_dist_backend() == "gloo"
    assert device.get_torch_device().__name__ == "torch.cpu"
    assert device.get_device_id() == 0
    assert device.device_exists("cpu") and not device.device_exists("cuda")


def test_copy_to_local_local_paths(tmp_path):
    src = tmp_path / "model"
    src.mkdir()
    (src / "config.json").write_text("{}")
    assert fs.copy_to_local(str(src)) == str(src)
    shm = fs.copy_to_local(str(src), use_shm=True)
    assert shm.startswith("/dev/shm/verl-cache/") and os.path.isfile(os.path.join(shm, "config.json"))
    assert not fs.is_non_local(str(src)) and fs.is_non_local("hdfs://a/b")


def test_copy_to_local_remote_goes_through_copy(tmp_path, monkeypatch):
    copied = []

    def fake_copy(src, dst, **kwargs):
        copied.append((src, dst))
        os.makedirs(dst)

    monkeypatch.setattr(fs, "copy", fake_copy)
    out = fs.copy_to_local("hdfs://cluster/models/m", cache_dir=str(tmp_path))
    assert out == fs.get_local_temp_path("hdfs://cluster/models/m", str(tmp_path)) and len(copied) == 1
    fs.copy_to_local("hdfs://cluster/models/m", cache_dir=str(tmp_path))
    assert len(copied) == 1  # cached


def test_py_functional_helpers():
    assert union_two_dict({"a": 1}, {"b": 2}) == {"a": 1, "b": 2}
    with pytest.raises(AssertionError, match="'a'"):
        union_two_dict({"a": 1}, {"a": 2})
    acc = {}
    append_to_dict(acc, {"x": 1})
    append_to_dict(acc, {"x": 2})
    assert acc == {"x": [1, 2]}


def test_dynamic_enum():
    class Color(DynamicEnum):
        pass

    red = Color.register("red")
    assert Color.RED is red and Color["red"] is red and "RED" in Color and red.value == 0
    with pytest.raises(ValueError):
        Color.register("RED")
    assert Color.remove("red") is red and Color.from_name("red") is None


def _sleepy(seconds):
    time.sleep(seconds)
    return "done"


def test_timeout_limit_kills_hung_calls():
    fast = timeout_limit(5)(_sleepy)
    assert fast(0.01) == "done"
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="_sleepy"):
        timeout_limit(0.5)(_sleepy)(30)
    assert time.monotonic() - start < 5
    with pytest.raises(TimeoutError):
        timeout_limit(0.3, use_signals=True)(_sleepy)(30)


def test_parallel_put_keeps_order(ray_cluster):
    refs = parallel_put(list(range(20)), max_workers=4)
    assert ray_cluster.get(refs) == list(range(20))
    with pytest.raises(AssertionError):
        parallel_put([])


def test_ray_noset_visible_devices():
    assert not ray_noset_visible_devices({})
    assert ray_noset_visible_devices({"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"})


def test_load_extern_type(tmp_path):
    path = tmp_path / "custom.py"
    path.write_text("class MyDataset:\n    pass\n\ndef score(x):\n    return x * 2\n")
    assert load_extern_type(str(path), "score")(3) == 6
    assert load_extern_type(None, "x") is None
    with pytest.raises(FileNotFoundError, match="nope.py"):
        load_extern_type(str(tmp_path / "nope.py"), "score")
    with pytest.raises(AttributeError, match="Missing"):
        load_extern_type(str(path), "Missing")


@dataclasses.dataclass
class OptimCfg:
    lr: float = 1e-3
    betas: tuple = (0.9, 0.999)


def test_omega_conf_to_dataclass():
    cfg = omega_conf_to_dataclass(OmegaConf.create({"lr": 0.5}), OptimCfg)
    assert cfg == OptimCfg(lr=0.5)
    with pytest.raises(TypeError, match="lrr"):
        omega_conf_to_dataclass(OmegaConf.create({"lrr": 0.5}), OptimCfg)
    target = OmegaConf.create({"_target_": f"{__name__}.OptimCfg", "lr": 0.1})
    assert omega_conf_to_dataclass(target).lr == 0.1
