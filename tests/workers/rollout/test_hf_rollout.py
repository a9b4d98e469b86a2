"""HFRollout (and NaiveRollout) on a tiny Qwen2: output layout, n-sample order, EOS handling, greedy determinism,
rollout log-probs (``calculate_log_probs``) against the recomputed ones."""

import pytest
import torch
from omegaconf import OmegaConf
from transformers import Qwen2Config, Qwen2ForCausalLM

from verl.protocol import DataProto
from verl.utils.model import compute_position_id_with_mask
from verl.workers.rollout import HFRollout, NaiveRollout

VOCAB, P, T = 96, 5, 6
PAD = 0
UNUSED_EOS = VOCAB - 1  # an id the model is unlikely to produce early


def tiny_lm() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        attn_implementation="sdpa",
    )
    return Qwen2ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def model():
    return tiny_lm()


def prompts(eos=UNUSED_EOS, **meta) -> DataProto:
    lens = [5, 2, 3]
    mask = torch.zeros(len(lens), P, dtype=torch.long)
    for i, n in enumerate(lens):
        mask[i, P - n :] = 1
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB - 1, (len(lens), P), generator=g) * mask + PAD * (1 - mask)
    batch = {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
    return DataProto.from_dict(tensors=batch, meta_info={"eos_token_id": eos, "pad_token_id": PAD, **meta})


def rollout_config(**overrides):
    cfg = {
        "name": "hf",
        "temperature": 1.0,
        "top_k": 0,
        "top_p": 1.0,
        "response_length": T,
        "do_sample": True,
        "n": 1,
        "val_kwargs": {"top_k": -1, "top_p": 1.0, "temperature": 0, "n": 1, "do_sample": False},
    }
    cfg.update(overrides)
    return OmegaConf.create(cfg)


def check_layout(out: DataProto, inp: DataProto, n: int, eos: int):
    b = len(inp) * n
    assert set(out.batch.keys()) == {"prompts", "responses", "input_ids", "attention_mask", "position_ids"}
    assert out.batch["prompts"].shape == (b, P)
    assert out.batch["responses"].shape == (b, T)
    for key in ("input_ids", "attention_mask", "position_ids"):
        assert out.batch[key].shape == (b, P + T)
    # sample j of prompt i sits at row i*n + j
    rep = inp.batch["input_ids"].repeat_interleave(n, dim=0)
    assert torch.equal(out.batch["prompts"], rep)
    assert torch.equal(out.batch["input_ids"], torch.cat([rep, out.batch["responses"]], dim=1))
    assert torch.equal(out.batch["attention_mask"][:, :P], inp.batch["attention_mask"].repeat_interleave(n, 0))
    pos = out.batch["position_ids"]
    prompt_pos = inp.batch["position_ids"].repeat_interleave(n, 0)
    assert torch.equal(pos[:, :P], prompt_pos)
    assert torch.equal(pos[:, P:], prompt_pos[:, -1:] + torch.arange(1, T + 1))
    # response mask: 1 through the first EOS, 0 after; tokens after EOS are padding
    resp, rmask = out.batch["responses"], out.batch["attention_mask"][:, P:]
    for row in range(b):
        hits = (resp[row] == eos).nonzero()
        end = int(hits[0]) + 1 if len(hits) else T
        assert rmask[row, :end].all() and not rmask[row, end:].any()
        assert (resp[row, end:] == PAD).all()


def test_sampling_n_interleaved_layout(model):
    inp = prompts()
    out = HFRollout(model, rollout_config(n=2)).generate_sequences(inp)
    check_layout(out, inp, n=2, eos=UNUSED_EOS)


def test_greedy_is_deterministic_and_matches_naive_rollout(model):
    cfg = rollout_config(n=4)
    a = HFRollout(model, cfg).generate_sequences(prompts(do_sample=False))
    b = HFRollout(model, cfg).generate_sequences(prompts(do_sample=False))
    assert len(a) == 3  # greedy ignores n
    assert torch.equal(a.batch["responses"], b.batch["responses"])
    naive = NaiveRollout(model, cfg).generate_sequences(prompts(do_sample=False))
    for key in a.batch.keys():
        assert torch.equal(a.batch[key], naive.batch[key]), key


def test_eos_stops_a_row_and_masks_what_follows(model):
    greedy = HFRollout(model, rollout_config()).generate_sequences(prompts(do_sample=False))
    eos = int(greedy.batch["responses"][0, 1])  # make row 0's second token the EOS
    out = HFRollout(model, rollout_config()).generate_sequences(prompts(eos=eos, do_sample=False))
    check_layout(out, prompts(), n=1, eos=eos)
    first_eos = int((out.batch["responses"][0] == eos).nonzero()[0])
    assert first_eos <= 1
    assert out.batch["attention_mask"][0, P + first_eos + 1 :].sum() == 0
    naive = NaiveRollout(model, rollout_config()).generate_sequences(prompts(eos=eos, do_sample=False))
    assert torch.equal(out.batch["responses"], naive.batch["responses"])
    assert torch.equal(out.batch["attention_mask"], naive.batch["attention_mask"])


def test_ignore_eos_generates_every_row_to_the_response_length(model):
    greedy = HFRollout(model, rollout_config()).generate_sequences(prompts(do_sample=False))
    eos = int(greedy.batch["responses"][0, 0])  # row 0 would stop at its first token
    stopped = HFRollout(model, rollout_config()).generate_sequences(prompts(eos=eos, do_sample=False))
    assert stopped.batch["attention_mask"][0, P:].sum() == 1
    out = HFRollout(model, rollout_config(ignore_eos=True)).generate_sequences(prompts(eos=eos, do_sample=False))
    assert out.batch["attention_mask"][:, P:].all() and not (out.batch["responses"] == eos).any()


def test_validate_uses_val_kwargs_and_one_sample(model):
    cfg = rollout_config(n=3, val_kwargs={"top_k": 5, "top_p": 0.9, "temperature": 0.5, "n": 1, "do_sample": True})
    out = HFRollout(model, cfg).generate_sequences(prompts(validate=True, do_sample=True))
    check_layout(out, prompts(), n=1, eos=UNUSED_EOS)
    # val_kwargs temperature 0 means greedy
    greedy_cfg = rollout_config(n=3)
    val = HFRollout(model, greedy_cfg).generate_sequences(prompts(validate=True, do_sample=True))
    ref = HFRollout(model, greedy_cfg).generate_sequences(prompts(do_sample=False))
    assert torch.equal(val.batch["responses"], ref.batch["responses"])


def test_micro_batches_give_the_same_greedy_output(model):
    whole = HFRollout(model, rollout_config()).generate_sequences(prompts(do_sample=False))
    split = HFRollout(model, rollout_config(micro_batch_size=2)).generate_sequences(prompts(do_sample=False))
    assert torch.equal(whole.batch["input_ids"], split.batch["input_ids"])


def test_sampling_follows_the_seed_and_requires_token_ids(model):
    torch.manual_seed(3)
    a = HFRollout(model, rollout_config(n=2, top_k=10)).generate_sequences(prompts())
    torch.manual_seed(3)
    b = HFRollout(model, rollout_config(n=2, top_k=10)).generate_sequences(prompts())
    assert torch.equal(a.batch["responses"], b.batch["responses"])
    bad = prompts()
    del bad.meta_info["pad_token_id"]
    with pytest.raises(KeyError, match="pad_token_id"):
        HFRollout(model, rollout_config()).generate_sequences(bad)


def test_prompt_columns_of_padding_in_every_row_do_not_change_generation(model):
    """The rollout generates without the all-padding prompt columns; the output keeps the caller's full width."""
    narrow = prompts(do_sample=False)
    wide = prompts(do_sample=False)
    extra = 3
    for key, fill in (("input_ids", PAD), ("attention_mask", 0), ("position_ids", 0)):
        wide.batch[key] = torch.cat([torch.full((3, extra), fill), narrow.batch[key]], dim=1)
    a = HFRollout(model, rollout_config()).generate_sequences(narrow)
    b = HFRollout(model, rollout_config()).generate_sequences(wide)
    assert torch.equal(a.batch["responses"], b.batch["responses"])
    assert torch.equal(b.batch["prompts"], wide.batch["input_ids"]) and b.batch["input_ids"].shape[1] == P + extra + T
    assert torch.equal(b.batch["position_ids"][:, -T:], a.batch["position_ids"][:, -T:])


def test_generation_and_dataloader_emit_no_deprecation_warnings(model, recwarn, caplog):
    """Our own calls must not trip transformers' or torchdata's deprecation notices (they flood a user's console)."""
    import logging
    import warnings

    from verl.utils.dataset.dataloader import StatefulDataLoader

    warnings.simplefilter("always")
    with caplog.at_level(logging.WARNING):
        HFRollout(model, rollout_config(n=2)).generate_sequences(prompts())
        StatefulDataLoader(list(range(4)), batch_size=2)
    notices = [str(w.message) for w in recwarn] + [r.getMessage() for r in caplog.records]
    assert not [n for n in notices if "deprecat" in n.lower()], notices


def test_weights_cast_to_gives_half_copies_and_puts_the_originals_back():
    from verl.workers.rollout.hf_rollout import weights_cast_to

    model = tiny_lm()
    model.lm_head.weight = model.model.embed_tokens.weight  # tied, as in many small models
    originals = {name: (p.data_ptr(), p.data.clone()) for name, p in model.named_parameters()}
    with weights_cast_to(model, torch.bfloat16):
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
        assert model.lm_head.weight is model.model.embed_tokens.weight
    for name, p in model.named_parameters():
        pointer, values = originals[name]
        assert p.data_ptr() == pointer and torch.equal(p.data, values), name  # the same fp32 storage, untouched


@pytest.mark.parametrize(
    "native_bf16, rollout_dtype, expected",
    [(True, "bfloat16", torch.bfloat16), (False, "bfloat16", torch.float32), (True, "float32", torch.float32)],
)
def test_cpu_generation_decodes_in_rollout_dtype_where_the_cpu_has_native_bf16(
    monkeypatch, native_bf16, rollout_dtype, expected
):
    import verl.workers.rollout.vllm_cpu as vllm_cpu

    monkeypatch.setattr(vllm_cpu, "cpu_has_native_bf16", lambda: native_bf16)
    model = tiny_lm()
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.append(module.lm_head.weight.dtype))
    out = HFRollout(model, rollout_config(dtype=rollout_dtype)).generate_sequences(prompts(do_sample=False))
    assert set(seen) == {expected} and len(out) == 3
    assert next(model.parameters()).dtype == torch.float32  # the training weights stay fp32


def recomputed_log_probs(model, out: DataProto, temperature: float) -> torch.Tensor:
    """The actor's recompute: one forward over prompt + response, logits / temperature, log-softmax at the tokens."""
    with torch.no_grad():
        logits = model(
            input_ids=out.batch["input_ids"],
            attention_mask=out.batch["attention_mask"],
            position_ids=out.batch["position_ids"],
        ).logits
    logits = logits[:, P - 1 : -1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, out.batch["responses"].unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rollout_log_probs_match_the_recomputed_ones(model, temperature):
    cfg = rollout_config(calculate_log_probs=True, temperature=temperature, n=2, dtype="float32")
    torch.manual_seed(3)
    eos = int(HFRollout(model, cfg).generate_sequences(prompts()).batch["responses"][0, 1])
    torch.manual_seed(3)  # the same samples, now stopping at that token: row 0 ends by its second step
    out = HFRollout(model, cfg).generate_sequences(prompts(eos=eos))
    rollout_lp = out.batch["rollout_log_probs"]
    mask = out.batch["attention_mask"][:, P:].bool()
    assert rollout_lp.dtype == torch.float32 and rollout_lp.shape == (6, T)
    assert torch.all(rollout_lp[~mask] == -1.0)  # vLLM's padding value after EOS
    assert (~mask).any()  # the padding case is exercised
    diff = (rollout_lp - recomputed_log_probs(model, out, temperature))[mask].abs().max().item()
    assert diff < 1e-5, diff  # measured: 4.8e-7 max (same float32 weights; KV-cached decode vs one forward)


def test_multi_turn_turns_carry_log_probs(model):
    from verl.workers.rollout.base import SamplingRequest

    cfg = rollout_config(calculate_log_probs=True, dtype="float32")
    rollout = HFRollout(model, cfg)
    request = SamplingRequest.resolve({}, rollout.config)
    rows = [[5, 9, 11], [3, 4]]
    with rollout.generation_context():
        turns = rollout.generate_turns(rows, [4, 3], request, [UNUSED_EOS])
    for row, turn in zip(rows, turns):
        assert turn.log_probs is not None and len(turn.log_probs) == len(turn.token_ids) > 0
        ids = torch.tensor([row + turn.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(row) - 1 : -1].float()
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(turn.token_ids)[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(turn.log_probs), expected, atol=1e-4, rtol=0)


def test_cpu_decode_dtype_is_decided_and_logged_once_per_rollout(model, monkeypatch, caplog):
    """Without native bf16 the CPU rollout decodes in float32 and says so when it is built, not at every
    generation."""
    import logging

    import verl.workers.rollout.vllm_cpu as vllm_cpu
    from verl.utils.device import is_accelerator_available

    if is_accelerator_available():
        pytest.skip("the CPU decode dtype applies on a CPU-only machine")
    monkeypatch.setattr(vllm_cpu, "cpu_has_native_bf16", lambda: False)
    with caplog.at_level(logging.WARNING, logger="verl.workers.rollout.vllm_cpu"):
        rollout = HFRollout(model, rollout_config(dtype="bfloat16"))
        for _ in range(2):
            rollout.generate_sequences(prompts(do_sample=False))
    assert caplog.text.count("no native bf16") == 1 and rollout._cpu_decode_dtype is torch.float32


@pytest.mark.parametrize("do_sample", [False, True])
def test_a_vision_models_placeholder_tokens_are_never_generated(do_sample):
    lm = tiny_lm()
    cfg = rollout_config(n=2, top_k=1)  # sampling at top-k 1 draws the greedy tokens, through the sampler
    plain = HFRollout(lm, cfg).generate_sequences(prompts(do_sample=do_sample))
    # the token this model writes most often stands for an image feature now
    placeholder = int(torch.bincount(plain.batch["responses"].flatten()).argmax())
    lm.config.image_token_id = placeholder
    out = HFRollout(lm, cfg).generate_sequences(prompts(do_sample=do_sample))
    assert not (out.batch["responses"] == placeholder).any()
