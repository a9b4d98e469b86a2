"""Cost of the single controller's calls on a 2-worker CPU group, against raw Ray in the same run.

Prints one JSON line per figure:
  (a) round-trip time of a no-op registered call (median ms), and of a raw Ray actor call for reference;
  (b) DP_COMPUTE_PROTO dispatch + collect of a 16 MB batch (each worker echoes its chunk) as a ratio to raw
      ray.put / ray.get of the same chunks, there and back.
Usage: python scripts/benchmark/bench_dispatch.py [--repeats 30] [--mbytes 16]
"""

import argparse
import json
import statistics
import time

import ray
import torch

from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup


class EchoWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def noop(self):
        return None

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def echo(self, data: DataProto) -> DataProto:
        return data

    def raw_noop(self):
        return None

    def raw_echo(self, chunk):
        return chunk


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def make_batch(mbytes: int) -> DataProto:
    rows = 256
    cols = mbytes * 1024 * 1024 // 4 // rows // 2
    return DataProto.from_dict(
        {"input_ids": torch.randint(0, 32000, (rows, cols), dtype=torch.int32), "values": torch.randn(rows, cols)}
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--mbytes", type=int, default=16)
    args = parser.parse_args()

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    pool = RayResourcePool([2], use_gpu=False)
    wg = RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(EchoWorker)), device_name="cpu")
    workers = wg.workers

    noop = median_ms(wg.noop, args.repeats)
    raw_noop = median_ms(lambda: ray.get([w.raw_noop.remote() for w in workers]), args.repeats)
    print(json.dumps({"figure": "noop_call_median_ms", "value": round(noop, 3), "target": 2.0}))
    print(json.dumps({"figure": "raw_ray_noop_call_median_ms", "value": round(raw_noop, 3)}))

    batch = make_batch(args.mbytes)
    tensor_chunks = [dict(c.batch.items()) for c in batch.chunk(2)]

    def dispatch_collect():
        out = wg.echo(batch)
        assert len(out) == len(batch)

    def raw_put_get():
        # the same chunks, driver -> object store -> driver, twice (there and back), as plain tensor dicts
        for _ in range(2):
            ray.get([ray.put(c) for c in tensor_chunks])

    def raw_actor_round_trip():
        # the same chunks through the same actors without DataProto / dispatch: put, call, get
        refs = [w.raw_echo.remote(ray.put(c)) for w, c in zip(workers, tensor_chunks)]
        ray.get(refs)

    ours = median_ms(dispatch_collect, args.repeats)
    raw = median_ms(raw_put_get, args.repeats)
    raw_actor = median_ms(raw_actor_round_trip, args.repeats)
    print(json.dumps({"figure": "dp_compute_proto_16mb_ms", "value": round(ours, 2)}))
    print(json.dumps({"figure": "raw_put_get_16mb_ms", "value": round(raw, 2)}))
    print(json.dumps({"figure": "raw_actor_echo_16mb_ms", "value": round(raw_actor, 2)}))
    print(json.dumps({"figure": "dp_compute_proto_vs_raw_put_get_ratio", "value": round(ours / raw, 3), "target": 1.3}))
    print(json.dumps({"figure": "dp_compute_proto_vs_raw_actor_echo_ratio", "value": round(ours / raw_actor, 3)}))
    ray.shutdown()


if __name__ == "__main__":
    main()
