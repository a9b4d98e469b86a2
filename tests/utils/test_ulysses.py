"""Ulysses sequence-parallel utilities: padding, all-to-all round trips and gradients on 2 gloo ranks, and the
attention patch (SP=2 logits and gradients equal the single-process packed forward)."""

import os

import pytest
import torch
import torch.distributed as dist

from tests.gloo_ranks import spawn_gloo_ranks
from verl.utils.ulysses import (
    gather_outpus_and_unpad,
    get_ulysses_sequence_parallel_world_size,
    ulysses_pad,
    validate_ulysses_config,
)

SP = 2


def test_ulysses_pad_2d_and_3d_positions():
    ids = torch.arange(1, 6).unsqueeze(0)  # 5 tokens
    pos = torch.tensor([[0, 1, 2, 0, 1]])
    out_ids, out_pos, pad = ulysses_pad(ids, pos, sp_size=4)
    assert pad == 3
    assert out_ids.tolist() == [[1, 2, 3, 4, 5, 0, 0, 0]]
    assert out_pos.tolist() == [[0, 1, 2, 0, 1, 0, 1, 2]]
    pos3 = torch.stack([pos, pos + 10, pos + 20])  # (3, 1, 5) mrope
    _, out_pos3, pad3 = ulysses_pad(ids, pos3, sp_size=2)
    assert pad3 == 1 and out_pos3.shape == (3, 1, 6)
    assert out_pos3[:, 0, -1].tolist() == [0, 0, 0]
    same_ids, same_pos, zero = ulysses_pad(ids, pos, sp_size=5)
    assert zero == 0 and same_ids is ids and same_pos is pos


def test_no_group_is_identity_and_config_check():
    x = torch.randn(3, 4)
    assert get_ulysses_sequence_parallel_world_size() == 1
    assert gather_outpus_and_unpad(x, gather_dim=0, unpad_dim=0, padding_size=1) is x
    validate_ulysses_config(8, 4)
    with pytest.raises(AssertionError, match="divisible"):
        validate_ulysses_config(6, 4)


def _tiny_qwen(num_kv_heads: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=num_kv_heads,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
    model.config._attn_implementation = "sdpa"
    return model


def _packed_batch():
    """Three sequences (lengths 11, 7, 15 -> 33 tokens, odd so SP must pad) packed in one row."""
    g = torch.Generator().manual_seed(1)
    lengths = [11, 7, 15]
    ids = torch.randint(1, 97, (1, sum(lengths)), generator=g)
    pos = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    weights = torch.randn(sum(lengths), 97, generator=g)
    return ids, pos, weights


def _reference(num_kv_heads: int):
    """Logits and parameter gradients of the plain packed forward (no SP)."""
    model = _tiny_qwen(num_kv_heads)
    ids, pos, weights = _packed_batch()
    logits = model(input_ids=ids, position_ids=pos, attention_mask=None, use_cache=False).logits[0]
    (logits * weights).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _collective_checks(rank: int):
    from verl.utils.ulysses import (
        all_to_all_tensor,
        gather_heads_scatter_seq,
        gather_seq_scatter_heads,
        set_ulysses_sequence_parallel_group,
        slice_input_tensor,
    )

    set_ulysses_sequence_parallel_group(dist.group.WORLD)
    # (bs=2, heads=4, seq=6, dim=3): rank r holds seq slice r
    full = torch.arange(2 * 4 * 6 * 3, dtype=torch.float32).reshape(2, 4, 6, 3)
    local = full[:, :, rank * 3 : (rank + 1) * 3].clone().requires_grad_(True)
    scattered = gather_seq_scatter_heads(local, seq_dim=2, head_dim=1)
    torch.testing.assert_close(scattered, full[:, rank * 2 : (rank + 1) * 2])
    back = gather_heads_scatter_seq(scattered, head_dim=1, seq_dim=2)
    torch.testing.assert_close(back, local)
    # d/dlocal of sum(scattered * w) routes w back to the rank that owns each element
    w = torch.randn(full.shape, generator=torch.Generator().manual_seed(5))
    (scattered * w[:, rank * 2 : (rank + 1) * 2]).sum().backward()
    torch.testing.assert_close(local.grad, w[:, :, rank * 3 : (rank + 1) * 3])

    direct = all_to_all_tensor(torch.full((4,), float(rank)), scatter_dim=0, gather_dim=0)
    assert direct.tolist() == [0.0, 0.0, 1.0, 1.0]

    # Gather: forward concatenates and unpads; backward keeps this rank's slice times sp
    x = torch.tensor([1.0, 2.0, 3.0]) + 10 * rank
    x.requires_grad_(True)
    gathered = gather_outpus_and_unpad(x, gather_dim=0, unpad_dim=0, padding_size=1)
    assert gathered.tolist() == [1.0, 2.0, 3.0, 11.0, 12.0]
    (gathered * torch.arange(1.0, 6.0)).sum().backward()
    expected = torch.tensor([1.0, 2.0, 3.0]) if rank == 0 else torch.tensor([4.0, 5.0, 0.0])
    torch.testing.assert_close(x.grad, SP * expected)

    sliced = slice_input_tensor(torch.arange(5).unsqueeze(0), dim=1, padding=True)
    assert sliced.tolist() == ([[0, 1, 2]] if rank == 0 else [[3, 4, 0]])
    set_ulysses_sequence_parallel_group(None)


def _model_check(rank: int, num_kv_heads: int) -> dict:
    from verl.models.transformers.monkey_patch import apply_monkey_patch
    from verl.utils.ulysses import set_ulysses_sequence_parallel_group, ulysses_pad_and_slice_inputs

    model = _tiny_qwen(num_kv_heads)
    apply_monkey_patch(model, ulysses_sp_size=SP, use_remove_padding=True)
    set_ulysses_sequence_parallel_group(dist.group.WORLD)
    try:
        ids, pos, weights = _packed_batch()
        ids_local, pos_local, pad = ulysses_pad_and_slice_inputs(ids, pos, sp_size=SP)
        assert ids_local.shape == (1, (ids.shape[1] + pad) // SP)
        logits_local = model(input_ids=ids_local, position_ids=pos_local, attention_mask=None, use_cache=False).logits
        logits = gather_outpus_and_unpad(logits_local[0], gather_dim=0, unpad_dim=0, padding_size=pad)
        (logits * weights).sum().backward()
    finally:
        set_ulysses_sequence_parallel_group(None)
    grads = {}
    for name, p in model.named_parameters():
        g = p.grad.clone()
        dist.all_reduce(g)  # what data-parallel averaging over the sp ranks does, before / sp
        grads[name] = g / SP
    return {"logits": logits.detach(), "grads": grads}


def _worker(rank: int, out_dir: str):
    torch.set_num_threads(1)
    _collective_checks(rank)
    results = {kv: _model_check(rank, kv) for kv in (2, 1)}
    if rank == 0:
        torch.save(results, os.path.join(out_dir, "sp.pt"))


def test_sp2_collectives_and_attention_patch_match_single_process(tmp_path):
    spawn_gloo_ranks(_worker, SP, str(tmp_path))
    results = torch.load(tmp_path / "sp.pt")
    for kv_heads, got in results.items():  # kv_heads=1 exercises the kv-head repeat (1 kv head, sp=2)
        ref_logits, ref_grads = _reference(kv_heads)
        torch.testing.assert_close(got["logits"], ref_logits, rtol=1e-5, atol=1e-5)
        for name, grad in ref_grads.items():
            torch.testing.assert_close(got["grads"][name], grad, rtol=1e-4, atol=1e-5, msg=name)
