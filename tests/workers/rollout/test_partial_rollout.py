"""Partial rollout on the HF rollout: a weight swap pauses a generation in flight after a decode step, the new
weights load, and the generation finishes under them, each token tagged with the version that sampled it.

The swap is placed deterministically: the gate holds the decode loop at its third step until the swap is waiting.
Greedy decoding makes "finishes under the new weights" checkable: the tokens after the swap are the new model's
greedy continuation of the prompt plus the three tokens the old model produced, and their log-probs are the new
model's.
"""

import threading
import time

import pytest
import torch
from omegaconf import OmegaConf

from tests.workers.rollout.test_hf_rollout import VOCAB
from tests.workers.rollout.test_hf_rollout import tiny_lm as hf_tiny_lm
from verl.protocol import DataProto
from verl.utils.model import compute_position_id_with_mask
from verl.workers.rollout import HFRollout
from verl.workers.rollout.base import SamplingRequest
from verl.workers.rollout.weight_gate import WeightGate

P, T, PAUSE_AT = 4, 10, 3
PAD, EOS = 0, 91  # an EOS the models do not produce in 10 greedy steps (checked below)


def tiny_lm(seed: int):
    """test_hf_rollout's tiny Qwen2; ``seed`` > 0 shifts every weight by seeded noise (a later version of it)."""
    model = hf_tiny_lm()
    if seed:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn(param.shape, generator=g) * 0.5)
    return model


def config():
    return OmegaConf.create(
        {
            "name": "hf",
            "response_length": T,
            "do_sample": False,
            "temperature": 1.0,
            "top_k": -1,
            "top_p": 1.0,
            "n": 1,
            "dtype": "float32",  # exact comparisons with the reference continuation
            "calculate_log_probs": True,
            "val_kwargs": {"top_k": -1, "top_p": 1.0, "temperature": 0, "n": 1, "do_sample": False},
        }
    )


class HeldGate(WeightGate):
    """Holds the decode loop at step ``PAUSE_AT`` until a swap waits, so the pause falls exactly there."""

    def __init__(self, version: int):
        super().__init__(version)
        self.reached = threading.Event()

    def step(self) -> bool:
        if self.steps + 1 == PAUSE_AT:
            self.reached.set()
            deadline = time.monotonic() + 30
            while not self.pause_requested and time.monotonic() < deadline:
                time.sleep(0.001)
        return super().step()


def prompt_ids() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return torch.randint(1, VOCAB - 1, (2, P), generator=g).tolist()


def run_with_swap(rollout: HFRollout, new_model, generate):
    """Run ``generate()`` on a thread, swap ``new_model``'s weights in (version 0 -> 1) at step PAUSE_AT."""
    gate = rollout.gate = HeldGate(version=0)
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("out", generate()))
    thread.start()
    assert gate.reached.wait(30), "the generation never reached the pause step"

    def load() -> int:
        with rollout.weights_released():  # as the rollout worker loads
            rollout.module.load_state_dict(new_model.state_dict())
        return 1

    assert gate.swap(load, timeout_s=30) == 1
    thread.join(30)
    assert not thread.is_alive() and "out" in result
    assert gate.pauses == 1
    return result["out"]


def greedy_turns(model, prompts: list[list[int]], max_tokens: int):
    rollout = HFRollout(model, config())
    request = SamplingRequest.resolve({}, rollout.config)
    with rollout.generation_context():
        return rollout.generate_turns(prompts, [max_tokens] * len(prompts), request, [EOS])


@pytest.fixture(scope="module")
def models():
    return tiny_lm(0), tiny_lm(1)


def test_turn_interrupted_by_a_swap_finishes_under_the_new_weights(models):
    old, new = models
    prompts = prompt_ids()
    before = greedy_turns(old, prompts, T)
    assert all(EOS not in t.token_ids and len(t.token_ids) == T for t in before)
    rollout = HFRollout(tiny_lm(0), config())
    request = SamplingRequest.resolve({}, rollout.config)

    def generate():
        with rollout.generation_context():
            return rollout.generate_turns(prompts, [T, T], request, [EOS])

    turns = run_with_swap(rollout, new, generate)
    check_resumed_turns(prompts, turns, before, lambda prompts, budget: greedy_turns(new, prompts, budget))


def check_resumed_turns(prompts, turns, before, new_greedy) -> None:
    """Each of ``turns`` (paused at PAUSE_AT, version 0 -> 1) kept the old weights' first tokens (``before``: their
    uninterrupted turns) and went on as the new weights' greedy continuation (``new_greedy(prompts, budget)``)."""
    for prompt, turn, reference in zip(prompts, turns, before):
        length = len(reference.token_ids)
        assert turn.versions == [0] * PAUSE_AT + [1] * (length - PAUSE_AT)
        assert turn.token_ids[:PAUSE_AT] == reference.token_ids[:PAUSE_AT]  # the old weights' tokens, kept
        (after,) = new_greedy([prompt + turn.token_ids[:PAUSE_AT]], length - PAUSE_AT)
        assert turn.token_ids[PAUSE_AT:] == after.token_ids  # the new weights' continuation
        torch.testing.assert_close(
            torch.tensor(turn.log_probs[:PAUSE_AT]), torch.tensor(reference.log_probs[:PAUSE_AT])
        )
        torch.testing.assert_close(torch.tensor(turn.log_probs[PAUSE_AT:]), torch.tensor(after.log_probs))
    # the weights really changed: the old model would have continued differently on some row
    assert any(t.token_ids[PAUSE_AT:] != r.token_ids[PAUSE_AT:] for t, r in zip(turns, before))


def test_single_turn_batch_carries_per_token_versions(models):
    old, new = models
    ids = torch.tensor(prompt_ids())
    mask = torch.ones_like(ids)
    batch = {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
    prompts = DataProto.from_dict(tensors=batch, meta_info={"eos_token_id": EOS, "pad_token_id": PAD})
    rollout = HFRollout(tiny_lm(0), config())
    out = run_with_swap(rollout, new, lambda: rollout.generate_sequences(prompts))
    versions = out.batch["weight_versions"]
    assert versions.shape == (2, T)
    assert torch.equal(versions, torch.tensor([[0] * PAUSE_AT + [1] * (T - PAUSE_AT)] * 2))
    # the tokens after the pause are the new weights' greedy continuation, with their log-probs
    prefix = out.batch["responses"][:, :PAUSE_AT].tolist()
    after = greedy_turns(new, [p + q for p, q in zip(ids.tolist(), prefix)], T - PAUSE_AT)
    assert out.batch["responses"][:, PAUSE_AT:].tolist() == [t.token_ids for t in after]
    torch.testing.assert_close(out.batch["rollout_log_probs"][:, PAUSE_AT:], torch.tensor([t.log_probs for t in after]))


def test_without_a_swap_nothing_pauses_and_versions_are_the_gates(models):
    old, _ = models
    rollout = HFRollout(old, config())
    rollout.gate = WeightGate(version=4)
    turns = greedy_turns(old, prompt_ids(), T)
    with rollout.generation_context():
        gated = rollout.generate_turns(prompt_ids(), [T, T], SamplingRequest.resolve({}, rollout.config), [EOS])
    assert [t.token_ids for t in gated] == [t.token_ids for t in turns]
    assert all(t.versions == [4] * T for t in gated) and rollout.gate.pauses == 0


def test_a_load_inside_an_open_cast_context_reaches_the_float32_weights(models, monkeypatch):
    """Where the CPU decodes in bf16, an open generation context holds bf16 copies in the parameters: a load must
    write the float32 originals (weights_released), or closing the context would put the old weights back."""
    import verl.workers.rollout.vllm_cpu as vllm_cpu

    monkeypatch.setattr(vllm_cpu, "cpu_rollout_dtype", lambda requested: "bfloat16")
    old, new = models
    rollout = HFRollout(tiny_lm(0), config())
    with rollout.generation_context():
        assert next(rollout.module.parameters()).dtype == torch.bfloat16
        with rollout.weights_released():
            assert next(rollout.module.parameters()).dtype == torch.float32
            rollout.module.load_state_dict(new.state_dict())
        cast = dict(rollout.module.named_parameters())
        for name, param in new.named_parameters():  # decoding goes on with the new weights, cast again
            assert cast[name].dtype == torch.bfloat16 and torch.equal(cast[name], param.to(torch.bfloat16)), name
    for name, param in rollout.module.named_parameters():
        assert param.dtype == torch.float32 and torch.equal(param, dict(new.named_parameters())[name]), name


def test_a_swap_waits_for_no_generation_when_none_runs():
    gate = WeightGate(version=2)
    assert gate.swap(lambda: 3) == 3 and gate.version == 3 and gate.pauses == 0
    with pytest.raises(RuntimeError):
        gate.swap(lambda: (_ for _ in ()).throw(RuntimeError("load failed")))
    assert gate.version == 3 and not gate.pause_requested  # a failed load leaves the gate open, version unchanged
