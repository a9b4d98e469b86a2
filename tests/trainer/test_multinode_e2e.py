"""main_ppo across a real two-node Ray cluster (a head and a worker raylet, both on this machine).

The cluster is started the way docs/multinode.md tells users to (`ray start --head`, `ray start --address`), and the
trainer joins it through RAY_ADDRESS with trainer.nnodes=2: one worker process per node.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from tests.gloo_ranks import free_port
from tests.trainer.ppo_e2e_utils import run_main_ppo


def _ray_start(args: list[str], env: dict, log) -> subprocess.Popen:
    """``ray start --block ...`` in its own session, so the whole node can be stopped without touching other Ray
    instances on the machine (``ray stop`` would stop every one)."""
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    return subprocess.Popen(
        [ray_cli, "start", "--block", "--disable-usage-stats", *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


def _actor_nodes(address: str, env: dict) -> dict[str, set[str]]:
    """Class name -> node ids of every actor the cluster ran (dead ones included)."""
    code = (
        f"import json, ray; ray.init(address={address!r}, log_to_driver=False); "
        "actors = ray._private.state.actors().values(); "
        "print(json.dumps([[a['ActorClassName'], a['Address']['NodeID']] for a in actors]))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    found: dict[str, set[str]] = {}
    for name, node in json.loads(out.stdout.strip().splitlines()[-1]):
        found.setdefault(name.rsplit(".", 1)[-1], set()).add(node)
    return found


@pytest.mark.timeout(900)
def test_main_ppo_runs_across_a_head_and_a_worker_node(tmp_path):
    port = free_port()
    address = f"127.0.0.1:{port}"
    # the head records its address in <temp dir>/ray_current_cluster, and a later plain ray.init() on this machine
    # joins whatever that file names: keep it out of the default /tmp/ray (a short path: Ray's sockets live there)
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    # loopback-only test cluster: no auth token to distribute (the guide shows the token setup for real clusters)
    env = dict(os.environ, RAY_AUTH_MODE="disabled", TOKENIZERS_PARALLELISM="false")
    env.pop("RAY_ADDRESS", None)
    log = open(tmp_path / "ray_nodes.log", "w")
    # head: 2 CPUs (the TaskRunner and one worker); worker node: 1 CPU, so one worker must be placed there
    head_args = ["--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false", f"--temp-dir={temp_dir}"]
    head = _ray_start(head_args, env, log)
    nodes = [head]
    try:
        deadline = time.time() + 120
        joined = None
        while time.time() < deadline:
            joined = _ray_start([f"--address={address}", "--num-cpus=1"], env, log)
            time.sleep(5)
            if joined.poll() is None:  # still blocking: the node is up
                break
            joined = None
        assert joined is not None, (tmp_path / "ray_nodes.log").read_text()[-3000:]
        nodes.append(joined)
        result = run_main_ppo(
            [
                "trainer.nnodes=2",
                "trainer.n_gpus_per_node=1",
                "trainer.total_training_steps=2",
                "trainer.device=cpu",
                f"trainer.default_local_dir={tmp_path}/run",
            ],
            cwd=str(tmp_path),
            timeout=600,
            env={**env, "RAY_ADDRESS": address},
        )
        assert result.returncode == 0, result.stderr[-4000:]
        assert "step 2/2" in result.stdout
        workers = _actor_nodes(address, env)
        # the two training workers (colocated actor/rollout/ref in one WorkerDict each) ran on two different nodes
        assert len(workers["WorkerDict"]) == 2, workers
    finally:
        for proc in reversed(nodes):
            _stop(proc)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)
        # a worker node may still record the (now stopped) cluster in the default place; later tests must not join it
        default_address_file = "/tmp/ray/ray_current_cluster"
        if os.path.exists(default_address_file):
            with open(default_address_file) as f:
                if f.read().strip().endswith(f":{port}"):
                    os.remove(default_address_file)
