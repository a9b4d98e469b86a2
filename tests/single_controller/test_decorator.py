"""`@register` and the dispatch registry (no Ray needed)."""

import inspect
import pickle

import pytest
import torch

from verl import DataProto
from verl.protocol import _padding_size_key
from verl.single_controller.base.decorator import (
    MAGIC_ATTR,
    Dispatch,
    Execute,
    _split_args_kwargs_data_proto_with_auto_padding,
    collect_dp_compute_data_proto,
    dispatch_dp_compute,
    dispatch_dp_compute_data_proto,
    dispatch_one_to_all,
    get_predefined_dispatch_fn,
    get_predefined_execute_fn,
    register,
    register_dispatch_mode,
    update_dispatch_mode,
)


class FakeGroup:
    world_size = 2


def test_enum_order_and_pickle():
    names = [m.name for m in Dispatch]
    assert names[:3] == ["RANK_ZERO", "ONE_TO_ALL", "ALL_TO_ALL"] and names[12] == "DIRECT_ROLLOUT_METHOD"
    assert Dispatch.DP_COMPUTE_PROTO.value == 9
    assert pickle.loads(pickle.dumps(Dispatch.DP_COMPUTE_PROTO)) is Dispatch.DP_COMPUTE_PROTO
    assert "dp_compute_proto" in Dispatch and Dispatch["ONE_TO_ALL"] is Dispatch.ONE_TO_ALL
    assert [m.name for m in Execute] == ["ALL", "RANK_ZERO"]


def test_register_validates_and_marks():
    with pytest.raises(AssertionError):
        register(dispatch_mode="DP_COMPUTE_PROTO")
    with pytest.raises(AssertionError):
        register(dispatch_mode={"dispatch_fn": len})
    with pytest.raises(AssertionError):
        register(execute_mode="ALL")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def f(x):
        return x

    @register()
    async def g(x):
        return x

    assert getattr(f, MAGIC_ATTR) == {
        "dispatch_mode": Dispatch.ONE_TO_ALL,
        "execute_mode": Execute.ALL,
        "blocking": False,
    }
    assert inspect.iscoroutinefunction(g)


def test_registry_api():
    fns = get_predefined_dispatch_fn(Dispatch.ONE_TO_ALL)
    assert fns["dispatch_fn"] is dispatch_one_to_all
    assert get_predefined_execute_fn(Execute.RANK_ZERO) == {"execute_fn_name": "execute_rank_zero"}
    with pytest.raises(KeyError):
        get_predefined_dispatch_fn(Dispatch.RANK_ZERO)

    def my_dispatch(wg, *args, **kwargs):
        return args, kwargs

    def my_collect(wg, out):
        return out[0]

    register_dispatch_mode("TEST_FIRST_ONLY", my_dispatch, my_collect)
    assert get_predefined_dispatch_fn(Dispatch.TEST_FIRST_ONLY) == {
        "dispatch_fn": my_dispatch,
        "collect_fn": my_collect,
    }
    with pytest.raises(ValueError):
        register_dispatch_mode("TEST_FIRST_ONLY", my_dispatch, my_collect)
    update_dispatch_mode(Dispatch.TEST_FIRST_ONLY, my_dispatch, my_dispatch)
    assert get_predefined_dispatch_fn(Dispatch.TEST_FIRST_ONLY)["collect_fn"] is my_dispatch
    Dispatch.remove("TEST_FIRST_ONLY")


def test_dispatch_errors_name_the_argument():
    with pytest.raises(AssertionError, match="positional argument 0"):
        dispatch_dp_compute_data_proto(FakeGroup(), [1, 2])
    with pytest.raises(AssertionError, match="'data'"):
        dispatch_dp_compute_data_proto(FakeGroup(), data=3)
    with pytest.raises(AssertionError, match="equal chunk"):
        dispatch_dp_compute_data_proto(FakeGroup(), DataProto.from_dict({"x": torch.zeros(3)}))
    with pytest.raises(AssertionError, match="'y'"):
        dispatch_dp_compute(FakeGroup(), y=[1])
    with pytest.raises(AssertionError, match="DataProto"):
        collect_dp_compute_data_proto(FakeGroup(), [1, 2])


def test_auto_padding_positional_and_keyword():
    a = DataProto.from_dict({"x": torch.arange(3)}, auto_padding=True)
    b = DataProto.from_dict({"x": torch.arange(3)}, auto_padding=True)
    args, kwargs = _split_args_kwargs_data_proto_with_auto_padding(2, a, data=b)
    assert kwargs[_padding_size_key] == 1
    assert [len(c) for c in args[0]] == [2, 2] and [len(c) for c in kwargs["data"]] == [2, 2]
    c = DataProto.from_dict({"x": torch.arange(5)}, auto_padding=True)
    with pytest.raises(AssertionError, match="same length"):
        _split_args_kwargs_data_proto_with_auto_padding(
            2, DataProto.from_dict({"x": torch.arange(4)}, auto_padding=True), c
        )
