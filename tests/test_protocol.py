"""DataProto semantics of spec 02: construction, indexing, key and batch operations, padding, pickling."""

import pickle

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from verl import DataProto
from verl.protocol import (
    DataProtoConfig,
    DataProtoItem,
    all_gather_data_proto,
    fold_batch_dim,
    pad_dataproto_to_divisor,
    unfold_batch_dim,
    union_numpy_dict,
    union_tensor_dict,
    unpad_dataproto,
)


def make(n=6):
    obs = torch.arange(1, n + 1).view(n, 1)
    labels = np.array([f"s{i}" for i in range(n)], dtype=object)
    return DataProto.from_dict(tensors={"obs": obs}, non_tensors={"labels": labels}, meta_info={"name": "abc"})


def rows(data):
    return data.batch["obs"].view(-1).tolist()


class TestConstruction:
    def test_from_dict_and_len(self):
        data = make()
        assert len(data) == 6
        assert data.batch.batch_size == torch.Size([6])
        assert data.meta_info == {"name": "abc"}

    def test_mismatched_batch_sizes(self):
        with pytest.raises(AssertionError, match="'b'"):
            DataProto.from_dict({"a": torch.zeros(3), "b": torch.zeros(4)})

    def test_two_batch_dims_rejected(self):
        with pytest.raises(AssertionError):
            DataProto.from_dict({"a": torch.zeros(2, 3)}, num_batch_dims=2)

    def test_non_tensor_must_be_ndarray_and_length(self):
        with pytest.raises(AssertionError, match="numpy"):
            DataProto(batch=None, non_tensor_batch={"x": [1, 2]})
        with pytest.raises(AssertionError, match="'x'"):
            DataProto.from_dict({"a": torch.zeros(3)}, {"x": np.array([1, 2], dtype=object)})

    def test_lists_become_object_arrays(self):
        data = DataProto.from_dict({"a": torch.zeros(2)}, {"x": [[1, 2], [3, 4]]})
        assert data.non_tensor_batch["x"].dtype == object and data.non_tensor_batch["x"].shape == (2, 2)

    def test_from_single_dict_subclass_and_errors(self):
        class Sub(DataProto):
            pass

        data = Sub.from_single_dict({"a": torch.zeros(2), "b": np.array(["x", "y"], dtype=object)})
        assert type(data) is Sub and "b" in data.non_tensor_batch
        with pytest.raises(ValueError, match="'c'"):
            DataProto.from_single_dict({"c": [1, 2]})

    def test_len_without_batch(self):
        assert len(DataProto()) == 0
        assert len(DataProto(non_tensor_batch={"x": np.zeros(3)})) == 3


class TestIndexing:
    def test_int_gives_item(self):
        item = make()[2]
        assert isinstance(item, DataProtoItem)
        assert item.batch["obs"].item() == 3 and item.non_tensor_batch["labels"] == "s2"

    @pytest.mark.parametrize(
        "index",
        [[1, 3], np.array([1, 3]), torch.tensor([1, 3]), np.array([False, True, False, True, False, False])],
    )
    def test_select_idxs(self, index):
        out = make()[index]
        assert rows(out) == [2, 4]
        assert out.non_tensor_batch["labels"].tolist() == ["s1", "s3"]
        assert out.batch.batch_size == torch.Size([2]) and all(isinstance(s, int) for s in out.batch.batch_size)

    def test_slice_shares_meta(self):
        data = make()
        out = data[1:5:2]
        assert rows(out) == [2, 4] and out.meta_info is data.meta_info

    def test_bad_index_type(self):
        with pytest.raises(TypeError):
            make()[1.5]
        with pytest.raises(TypeError):
            make()["obs"]


class TestKeyOps:
    def test_select_and_pop(self):
        data = DataProto.from_dict({"a": torch.zeros(2), "b": torch.ones(2)}, {"x": np.array([1, 2])}, {"m": 1})
        sel = data.select(batch_keys=["a"], non_tensor_batch_keys=["x", "unknown"], meta_info_keys=["m"])
        assert list(sel.batch.keys()) == ["a"] and list(sel.non_tensor_batch) == ["x"]
        popped = data.pop(batch_keys=["b"], meta_info_keys=["m"])
        assert list(popped.batch.keys()) == ["b"] and "b" not in data.batch.keys()
        assert popped.meta_info == {"m": 1} and data.meta_info == {}
        with pytest.raises(AssertionError, match="'zzz'"):
            data.pop(batch_keys=["zzz"])

    def test_select_deepcopy(self):
        data = make()
        copy = data.select(deepcopy=True)
        copy.meta_info["name"] = "changed"
        assert data.meta_info["name"] == "abc"

    def test_rename(self):
        data = make()
        data.rename("obs", "obs2")
        assert "obs2" in data.batch.keys()
        with pytest.raises(TypeError):
            data.rename(1, "x")
        with pytest.raises(ValueError):
            data.rename(["obs2"], ["a", "b"])

    def test_union(self):
        a = DataProto.from_dict({"x": torch.arange(3)}, {"s": np.array(["a", np.nan, "c"], dtype=object)}, {"k": 1})
        b = DataProto.from_dict({"x": torch.arange(3).clone(), "y": torch.ones(3)}, {"s": a.non_tensor_batch["s"]})
        a.union(b)
        assert set(a.batch.keys()) == {"x", "y"}
        conflict = DataProto.from_dict({"x": torch.arange(3) + 1})
        with pytest.raises(AssertionError, match="'x'"):
            a.union(conflict)

    def test_union_helpers(self):
        td1 = TensorDict({"a": torch.zeros(2)}, batch_size=[2])
        with pytest.raises(AssertionError):
            union_tensor_dict(td1, TensorDict({"a": torch.zeros(3)}, batch_size=[3]))
        d1 = {"a": np.array([1.0, np.nan])}
        union_numpy_dict(d1, {"a": np.array([1.0, np.nan]), "b": np.array([2])})
        assert set(d1) == {"a", "b"}
        with pytest.raises(AssertionError, match="'a'"):
            union_numpy_dict(d1, {"a": np.array([1.0, 2.0])})


class TestBatchOps:
    def test_chunk_and_concat(self):
        data = make()
        with pytest.raises(AssertionError, match="equal chunk"):
            data.chunk(5)
        parts = data.chunk(2)
        assert [rows(p) for p in parts] == [[1, 2, 3], [4, 5, 6]]
        assert parts[0].meta_info is data.meta_info
        back = DataProto.concat(parts)
        assert (
            rows(back) == rows(data)
            and back.non_tensor_batch["labels"].tolist() == data.non_tensor_batch["labels"].tolist()
        )
        assert back.meta_info == data.meta_info

    def test_concat_rejects_extra_keys(self):
        a = DataProto.from_dict({"x": torch.zeros(1)}, {"s": np.array([1])})
        b = DataProto.from_dict({"x": torch.zeros(1)}, {"s": np.array([1]), "t": np.array([2])})
        with pytest.raises(AssertionError, match="'t'"):
            DataProto.concat([a, b])

    def test_reorder(self):
        data = make()
        data.reorder(torch.tensor([3, 4, 2, 0, 1, 5]))
        assert rows(data) == [4, 5, 3, 1, 2, 6]
        assert data.non_tensor_batch["labels"].tolist() == ["s3", "s4", "s2", "s0", "s1", "s5"]

    def test_repeat(self):
        data = make(2)
        assert rows(data.repeat(2, interleave=True)) == [1, 1, 2, 2]
        assert rows(data.repeat(2, interleave=False)) == [1, 2, 1, 2]
        assert data.repeat(2, interleave=False).non_tensor_batch["labels"].tolist() == ["s0", "s1", "s0", "s1"]

    def test_sample_level_repeat(self):
        data = make(3)
        for counts in ([3, 1, 2], (3, 1, 2), torch.tensor([3, 1, 2]), np.array([3, 1, 2])):
            assert rows(data.sample_level_repeat(counts)) == [1, 1, 1, 2, 3, 3]
        with pytest.raises(AssertionError):
            data.sample_level_repeat(np.ones((3, 1), dtype=int))

    def test_unfold_column_chunks(self):
        data = DataProto.from_dict(
            {"cols": torch.arange(8).view(2, 4), "other": torch.tensor([10, 20])},
            {"names": np.array([["a1", "a2"], ["b1", "b2"]], dtype=object), "tag": np.array(["x", "y"], dtype=object)},
        )
        out = data.unfold_column_chunks(2, split_keys=["cols", "names"])
        assert out.batch["cols"].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
        assert out.batch["other"].tolist() == [10, 10, 20, 20]
        assert out.non_tensor_batch["names"].tolist() == [["a1"], ["a2"], ["b1"], ["b2"]]
        assert out.non_tensor_batch["tag"].tolist() == ["x", "x", "y", "y"]
        assert len(data.unfold_column_chunks(2)) == 4  # None means "split nothing"

    def test_make_iterator_seeded(self):
        data = make(8)
        first = [rows(b) for b in data.make_iterator(2, epochs=2, seed=1, dataloader_kwargs={"shuffle": True})]
        second = [rows(b) for b in data.make_iterator(2, epochs=2, seed=1, dataloader_kwargs={"shuffle": True})]
        assert first == second and len(first) == 8
        assert sorted(sum(first[:4], [])) == list(range(1, 9))
        with pytest.raises(AssertionError, match="mini_batch_size"):
            data.make_iterator(3, epochs=1)

    def test_split(self):
        assert [len(p) for p in make(5).split(2)] == [2, 2, 1]


class TestPadding:
    def test_pad_to_divisor(self):
        data = make(3)
        padded, pad = pad_dataproto_to_divisor(data, 2)
        assert pad == 1 and rows(padded) == [1, 2, 3, 1]
        same, pad = pad_dataproto_to_divisor(data, 3)
        assert pad == 0 and same is data
        padded, pad = pad_dataproto_to_divisor(data, 7)
        assert pad == 4 and rows(padded) == [1, 2, 3, 1, 2, 3, 1]
        assert padded.meta_info == data.meta_info
        assert rows(unpad_dataproto(padded, pad)) == [1, 2, 3]

    def test_padding_in_place(self):
        data = make(3)
        data.padding(2)
        assert rows(data) == [1, 2, 3, 3, 3]
        data.padding(1, padding_candidate="first")
        assert rows(data)[-1] == 1

    def test_auto_padding_switches(self, monkeypatch):
        data = make(3)
        assert not data.is_padding_enabled()
        assert DataProto.from_dict({"a": torch.zeros(3)}, auto_padding=True).is_padding_enabled()
        monkeypatch.setenv("VERL_AUTO_PADDING", "1")
        assert data.is_padding_enabled()
        monkeypatch.delenv("VERL_AUTO_PADDING")
        DataProtoConfig.auto_padding = True
        try:
            assert data.is_padding_enabled()
            assert len(data.chunk(2)) == 2  # unequal chunks allowed with padding on
        finally:
            DataProtoConfig.auto_padding = False
        with pytest.raises(AssertionError):
            DataProtoConfig.auto_padding = "yes"


def test_fold_unfold():
    data = DataProto.from_dict({"obs": torch.tensor([[1], [2], [3]])}, {"s": np.array(["a", "b", "c"], dtype=object)})
    data = data.repeat(2, interleave=True)
    folded = fold_batch_dim(data, 3)
    assert folded.batch.batch_size == torch.Size([3]) and folded.batch["obs"].shape == (3, 2, 1)
    folded.reorder(torch.tensor([1, 2, 0]))
    out = unfold_batch_dim(folded, batch_dims=2)
    assert rows(out) == [2, 2, 3, 3, 1, 1]
    assert out.non_tensor_batch["s"].tolist() == ["b", "b", "c", "c", "a", "a"]


def _all_gather_worker(rank, init_file, result_file):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    data = DataProto.from_dict(
        {"obs": torch.tensor([[10 * rank], [10 * rank + 1]]), "mask": torch.ones(2, 3) * rank},
        {"s": np.array([f"r{rank}a", f"r{rank}b"], dtype=object)},
        meta_info={"rank": rank},
    )
    all_gather_data_proto(data, process_group=None)  # None: the default (world) group
    if rank == 1:
        with open(result_file, "wb") as f:
            pickle.dump(data, f)
    dist.destroy_process_group()


def test_all_gather_data_proto_concatenates_in_rank_order_in_place(tmp_path):
    import torch.multiprocessing as mp

    result = tmp_path / "gathered.pkl"
    mp.spawn(_all_gather_worker, args=(str(tmp_path / "init"), str(result)), nprocs=2, join=True)
    with open(result, "rb") as f:
        data = pickle.load(f)
    assert len(data) == 4 and data.batch.batch_size == torch.Size([4])
    assert rows(data) == [0, 1, 10, 11]
    assert torch.equal(data.batch["mask"], torch.tensor([[0.0] * 3] * 2 + [[1.0] * 3] * 2))
    assert data.non_tensor_batch["s"].tolist() == ["r0a", "r0b", "r1a", "r1b"]
    assert data.meta_info == {"rank": 1}  # meta_info stays each rank's own


class TestSerialization:
    def test_pickle_round_trip_dtypes(self):
        data = DataProto.from_dict(
            {
                "f": torch.randn(3, 2),
                "bf": torch.randn(3, 2).to(torch.bfloat16),
                "b": torch.tensor([True, False, True]),
                "nc": torch.arange(6).view(2, 3).t(),  # non-contiguous
            },
            {"s": np.array(["x", None, 3], dtype=object)},
            {"m": {"k": 1}},
        )
        back = pickle.loads(pickle.dumps(data))
        for key in data.batch.keys():
            assert back.batch[key].dtype == data.batch[key].dtype and torch.equal(back.batch[key], data.batch[key])
        assert back.non_tensor_batch["s"].tolist() == ["x", None, 3] and back.meta_info == {"m": {"k": 1}}
        back.batch["f"] += 1  # arrives writable

    def test_save_load_disk(self, tmp_path):
        data = make()
        path = tmp_path / "test_data.pt"
        data.save_to_disk(path)
        back = DataProto.load_from_disk(path)
        assert rows(back) == rows(data) and back.meta_info == data.meta_info
        assert back.non_tensor_batch["labels"].tolist() == data.non_tensor_batch["labels"].tolist()

    def test_no_batch_round_trip(self):
        back = pickle.loads(pickle.dumps(DataProto(non_tensor_batch={"x": np.array([1, 2])})))
        assert back.batch is None and len(back) == 2
