"""A rollout on workers of its own, fed by the checkpoint engine: two FSDP2 actor ranks (one gloo world) update the
policy and send it; a standalone HF rollout (a world of its own) receives it. Afterwards its weights equal the
actor's bit for bit, its greedy generations equal the actor's own (hybrid) HF rollout's, every sample carries the
version it was generated with, and the transfer's bytes are the model's parameter bytes."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.gloo_ranks import free_port, publish_port, wait_for_port
from tests.workers.gpu_actor_steps import BATCH, RESPONSE_LEN, rollout_batch

ACTOR_WORLD = 2
VOCAB = 200
NAME = "actor_rollout_ref.rollout.name"


def _config(model: str, hybrid: bool, extra: tuple[str, ...] = ()):
    """The ``actor_rollout_ref`` section on the tiny model (HF rollout unless ``extra`` names another)."""
    from tests.trainer.ppo_e2e_utils import compose_config

    return compose_config(
        [
            *extra,
            f"actor_rollout_ref.model.path={model}",
            f"actor_rollout_ref.hybrid_engine={hybrid}",
            "actor_rollout_ref.actor.strategy=fsdp2",
            "actor_rollout_ref.actor.optim.lr=1e-2",
            "actor_rollout_ref.actor.optim.total_training_steps=10",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.actor.use_kl_loss=False",
            "actor_rollout_ref.actor.entropy_coeff=0",
            *(() if any(o.startswith(f"{NAME}=") for o in extra) else (f"{NAME}=hf",)),
            "actor_rollout_ref.rollout.n=1",
            f"actor_rollout_ref.rollout.response_length={RESPONSE_LEN}",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
            # 4 KiB buckets: most of the tiny model's tensors span several
            "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=0.00390625",
            f"data.max_response_length={RESPONSE_LEN}",
        ]
    ).actor_rollout_ref


def _prompts():
    """The left-padded prompts of the rollout batch, to generate greedily from."""
    from verl import DataProto

    batch = rollout_batch(vocab=VOCAB, seed=3)
    prompt_len = batch.batch["input_ids"].shape[1] - RESPONSE_LEN
    tensors = {key: batch.batch[key][:, :prompt_len] for key in ("input_ids", "attention_mask", "position_ids")}
    return DataProto.from_dict(tensors, meta_info={"do_sample": False, "validate": True})


def _actor(rank: int, model: str, port_file: str, out: str) -> None:
    """Actor ranks (FSDP2 over 2 processes): sync version 0, one PPO update, sync version 1."""
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(_config(model, hybrid=True), role="actor_rollout")
    worker.init_model()
    # as the trainer does: rank 0 binds the rendezvous and hands out its address (here through a file)
    address, port = worker.checkpoint_engine_address()
    if rank == 0:
        publish_port(port_file, port)
    worker.init_checkpoint_engine(address, port, 2, 0)
    stats = [worker.send_weights(0)]
    batch = rollout_batch(vocab=VOCAB, seed=2)
    worker.update_actor(batch.chunk(ACTOR_WORLD)[rank])
    stats.append(worker.send_weights(1))
    weights = {name: tensor.clone() for name, tensor in worker.actor_engine.hf_weights()}
    generated = worker.generate_sequences(_prompts().chunk(ACTOR_WORLD)[rank]).batch["responses"]
    parts = [None] * ACTOR_WORLD
    dist.all_gather_object(parts, generated)
    if rank == 0:
        param_bytes = sum(p.numel() * p.element_size() for p in worker.actor_module.parameters())
        torch.save({"stats": stats, "weights": weights, "responses": torch.cat(parts), "param_bytes": param_bytes},
                   out)  # fmt: skip
    else:
        assert stats == [None, None]  # the other actor ranks gather, rank 0 sends
    worker.close_checkpoint_engine()


def _rollout(model: str, port_file: str, out: str) -> None:
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(_config(model, hybrid=False), role="rollout")
    worker.init_model()
    assert worker.actor_engine is None and worker.actor is None  # the inference engine alone, no optimizer
    before = worker.generate_sequences(_prompts())
    worker.init_checkpoint_engine("127.0.0.1", wait_for_port(port_file), 2, 1)
    stats = [worker.receive_weights()]
    after_v0 = worker.generate_sequences(_prompts())
    stats.append(worker.receive_weights())
    after = worker.generate_sequences(_prompts())
    torch.save(
        {
            "stats": stats,
            "weights": {name: tensor.clone() for name, tensor in worker.actor_module.state_dict().items()},
            "responses": after.batch["responses"],
            "responses_v0": after_v0.batch["responses"],
            "responses_before": before.batch["responses"],
            "versions": [list(out.non_tensor_batch["weight_version"]) for out in (before, after_v0, after)],
        },
        out,
    )
    worker.close_checkpoint_engine()


def _main(index: int, model: str, ports: tuple[int, int], out_dir: str) -> None:
    actor_port, rollout_port = ports
    port_file = os.path.join(out_dir, "transfer_port")
    if index < ACTOR_WORLD:  # the actor's world: processes 0 and 1
        env = dict(RANK=index, WORLD_SIZE=ACTOR_WORLD, LOCAL_RANK=index, LOCAL_WORLD_SIZE=ACTOR_WORLD, port=actor_port)
    else:  # the rollout's own world of one
        env = dict(RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, port=rollout_port)
    os.environ.update({k: str(v) for k, v in env.items() if k != "port"})
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(env["port"]), MY_HOST_IP="127.0.0.1", TOKENIZERS_PARALLELISM="false"
    )
    if index < ACTOR_WORLD:
        _actor(index, model, port_file, os.path.join(out_dir, "actor.pt"))
    else:
        _rollout(model, port_file, os.path.join(out_dir, "rollout.pt"))
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see tests/gloo_ranks.py


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from verl.demo.tiny_model import make_tiny_model_dir

    # a tied LM head, as in SmolLM2 and Qwen2.5-0.5B: the stream leaves it out and the rollout's stays tied
    root = tmp_path_factory.mktemp("standalone")
    return make_tiny_model_dir(str(root / "model"), hidden_size=64, num_layers=2, tie_word_embeddings=True)


def test_rollout_on_its_own_worker_receives_the_updated_actor(model_dir, tmp_path):
    ports = (free_port(), free_port())
    mp.spawn(_main, args=(model_dir, ports, str(tmp_path)), nprocs=ACTOR_WORLD + 1, join=True)
    actor = torch.load(tmp_path / "actor.pt", weights_only=False)
    rollout = torch.load(tmp_path / "rollout.pt", weights_only=False)

    # versions: the checkpoint's own weights (-1), then each sync's
    assert [set(v) for v in rollout["versions"]] == [{-1}, {0}, {1}]
    assert [s.version for s in actor["stats"]] == [s.version for s in rollout["stats"]] == [0, 1]
    # every parameter byte travels once, in 4 KiB buckets
    for sent, received in zip(actor["stats"], rollout["stats"], strict=True):
        assert sent.bytes == received.bytes == actor["param_bytes"]
        assert sent.buckets == received.buckets >= actor["param_bytes"] // 4096
    # the weights the rollout holds are the updated actor's, exactly (its tied head is its embedding)
    assert "lm_head.weight" not in actor["weights"]
    assert actor["weights"].keys() == rollout["weights"].keys() - {"lm_head.weight"}
    assert torch.equal(rollout["weights"]["lm_head.weight"], actor["weights"]["model.embed_tokens.weight"])
    for name, tensor in actor["weights"].items():
        assert torch.equal(rollout["weights"][name], tensor), name
    # and so are its greedy samples; before the update they differed (the update moved the policy)
    assert torch.equal(rollout["responses"], actor["responses"])
    assert torch.equal(rollout["responses_v0"], rollout["responses_before"])  # version 0 = the checkpoint
    assert not torch.equal(rollout["responses"], rollout["responses_v0"])


@pytest.fixture
def _no_default_group_left():
    """The in-process workers form a gloo group in the pytest process; later tests expect none."""
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_in_process_groups_sync_through_the_local_backend(model_dir, _no_default_group_left):
    """The in-process worker group runs the actor's and the rollout's calls one after the other in the driver: the
    ``local`` transport hands the buckets over in memory, where a collective would wait for the other side."""
    import ray

    from verl.single_controller.inprocess import InProcessWorkerGroup
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    def group(hybrid: bool, role: str):
        worker = RayClassWithInitArgs(ray.remote(ActorRolloutRefWorker), config=_config(model_dir, hybrid), role=role)
        return InProcessWorkerGroup(RayResourcePool([1], use_gpu=False), worker)

    actor_wg, rollout_wg = group(True, "actor_rollout"), group(False, "rollout")
    actor_wg.init_model()
    rollout_wg.init_model()
    actor_wg.init_checkpoint_engine("in-process", 0, 2, 0, backend="local")
    rollout_wg.init_checkpoint_engine("in-process", 0, 2, 1, backend="local")
    actor_wg.update_actor(rollout_batch(vocab=VOCAB, seed=2))
    [sent] = actor_wg.send_weights(5)
    [received] = rollout_wg.receive_weights()
    assert (sent.version, received.version) == (5, 5) and sent.bytes == received.bytes > 0
    assert sent.buckets == received.buckets > 1  # 4 KiB buckets
    expected = _prompts()
    generated = rollout_wg.generate_sequences(expected)
    assert set(generated.non_tensor_batch["weight_version"]) == {5}
    assert torch.equal(generated.batch["responses"], actor_wg.generate_sequences(_prompts()).batch["responses"])
    with pytest.raises(RuntimeError, match="nothing to receive"):
        rollout_wg.receive_weights()  # each transfer is read once
    actor_wg.close_checkpoint_engine()
    rollout_wg.close_checkpoint_engine()
