"""bench_vs_trl.py: our side's overrides compose with main_ppo's config, and rounds pool steps after each warm-up."""

import argparse
import json
import os
from types import SimpleNamespace

from hydra import compose, initialize_config_dir

from tests.benchmark_scripts import ROOT, load_benchmark

bench = load_benchmark("bench_vs_trl")


def _args(**changes) -> argparse.Namespace:
    """The bench's own defaults (8 prompts x n=4 x 128 tokens, 2 workers), with ``changes``."""
    defaults = {"prompts": 8, "n": 4, "workers": 2, "micro": None, "lr": 1e-3, "kl_coef": 0.001}
    defaults |= {
        "remove_padding": False,
        "response_length": 128,
        "prompt_length": 64,
        "steps": 4,
        "precision": "fp32",
        "rollout": "vllm",
        "extra": [],
    }
    return argparse.Namespace(**{**defaults, "train_file": "/data/train.parquet", **changes})


def _composed(args: argparse.Namespace):
    """main_ppo's config with our side's overrides for ``args``."""
    overrides = bench.our_overrides(args, "/models/m", "/tmp/w")
    with initialize_config_dir(config_dir=os.path.join(ROOT, "verl", "trainer", "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def test_our_overrides_compose_into_the_same_work_as_trls():
    cfg = _composed(_args(precision="bf16", micro=4))
    arr = cfg.actor_rollout_ref
    assert cfg.data.train_batch_size == 8 and arr.rollout.n == 4 and cfg.data.max_response_length == 128
    assert arr.actor.ppo_mini_batch_size == 8 and arr.actor.ppo_micro_batch_size_per_gpu == 4
    assert arr.actor.use_kl_loss and arr.actor.kl_loss_coef == 0.001 and arr.actor.optim.lr == 1e-3
    assert arr.actor.fsdp_config.mixed_precision.param_dtype == "bf16" and arr.ref.fsdp_config.model_dtype == "bf16"
    assert cfg.trainer.n_gpus_per_node == 2 and cfg.algorithm.adv_estimator == "grpo"


def test_one_worker_side_generates_without_tensor_parallelism():
    """``--workers 1``: verl's default rollout TP of 2 does not divide one worker (the config check refuses it)."""
    for workers, tp in ((1, 1), (2, 2)):
        cfg = _composed(_args(workers=workers, rollout="hf"))
        assert cfg.trainer.n_gpus_per_node == workers
        assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == tp


def test_packing_is_a_side_of_its_own():
    """``--remove-padding false,true``: verl's default padded rows and the packed path most scripts turn on."""
    for packed in (False, True):
        overrides = bench.our_overrides(_args(remove_padding=packed), "/models/m", "/tmp/w")
        assert f"actor_rollout_ref.model.use_remove_padding={packed}" in overrides
    assert bench.our_sides(["hf"], [1], [False]) == {"hf": ("hf", 1, False)}
    assert list(bench.our_sides(["hf"], [1, 2], [False, True])) == [
        "hf_w1_padded",
        "hf_w1_packed",
        "hf_w2_padded",
        "hf_w2_packed",
    ]


def test_every_side_passes_the_config_check_before_anything_runs(tmp_path):
    """A side whose overrides main_ppo would refuse stops the benchmark before TRL's run (not after it)."""
    import pytest

    from verl.demo.assets import resolve_builtin_path
    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.workers.config.errors import ConfigError

    model = make_tiny_model_dir(str(tmp_path / "model"))
    args = _args(rollout="hf", train_file=resolve_builtin_path("builtin://arithmetic/train.parquet"))
    bench.check_our_sides(args, model, bench.our_sides(["hf"], [1, 2], [False, True]))
    with pytest.raises(ConfigError, match="ppo_mini_batch_size|train_batch_size|n_gpus_per_node"):
        bench.check_our_sides(args, model, {"hf_w3": ("hf", 3, False)})  # 32 samples do not split over 3 workers


def _memory(peak_gb: float) -> SimpleNamespace:
    peak = int(peak_gb * 2**30)
    return SimpleNamespace(
        peak_total=peak, peak_pss=peak, peak_by_group={"workers": peak}, pss_by_group_at_peak={"workers": peak}
    )


def test_rounds_pool_every_runs_steps_after_its_own_warmup(capsys):
    runs = [
        {"step_s": [90.0, 10.0, 12.0], "phases": [{"gen": 50.0}, {"gen": 4.0}, {"gen": 6.0}], "tokens": [0, 100, 120]},
        {"step_s": [80.0, 14.0, 16.0], "phases": [{"gen": 40.0}, {"gen": 8.0}, {"gen": 8.0}], "tokens": [0, 140, 160]},
    ]
    runs[0]["memory"], runs[1]["memory"] = _memory(1.0), _memory(3.0)
    step = bench.emit_side("ours_vllm", runs, ("gen", "ref"))
    assert step == 13.0  # median of 10, 12, 14, 16: the warm-up steps 90 and 80 are left out
    assert bench.median_step(runs[0]) == 11.0 and bench.median_step(runs[1]) == 15.0
    figures = {line["figure"]: line for line in map(json.loads, capsys.readouterr().out.splitlines())}
    assert figures["ours_vllm_phase_gen_s"]["value"] == 7.0  # 4, 6, 8, 8
    assert "ours_vllm_phase_ref_s" not in figures  # a phase no step reported is not printed as zero
    assert figures["ours_vllm_tokens_per_s"]["value"] == round(130 / 13.0, 1)
    assert figures["ours_vllm_peak_pss_gb"]["value"] == 3.0  # the worst round's peak
    assert figures["ours_vllm_step_s"]["steps"] == [[90.0, 10.0, 12.0], [80.0, 14.0, 16.0]]


def test_phase_ratios_and_the_step_bound_come_from_the_pooled_phases(capsys):
    trl = [{"step_s": [99.0, 10.0, 12.0], "phases": [{}, {"gen": 4.0, "ref": 2.0}, {"gen": 4.0, "ref": 2.0}]}]
    bench.add_trl_update(trl)
    ours = [{"step_s": [50.0, 8.0, 8.0], "phases": [{}, *[{"gen": 2.0, "ref": 1.0, "update_actor": 3.5}] * 2]}]
    bench.emit_phase_ratios("hf", trl, ours, trl_step=11.0)
    figures = {line["figure"]: line["value"] for line in map(json.loads, capsys.readouterr().out.splitlines())}
    assert figures["phase_ratio_ours_over_trl_ref_hf"] == 0.5
    assert figures["phase_ratio_ours_over_trl_update_hf"] == round(3.5 / 5.0, 2)  # TRL's update: 4 and 6, median 5
    assert figures["step_ratio_bound_hf"] == round(11.0 / (11.0 - 4.0 + 2.0), 2)


class _LinearFlops:
    """A FLOP counter of 1e9 forward FLOPs per token (``estimate_flops`` reports forward + backward, in TFLOPs)."""

    def estimate_flops(self, seqlens, delta_time):
        return 3 * sum(seqlens) * 1e9 / 1e12 / delta_time, 0.0


def test_trl_phases_are_counted_as_ours_with_the_update_as_the_rest_of_the_step():
    # 100 tokens: one forward is 1e11 FLOPs; the update (10 - 4 - 2 = 4 s) is forward + backward, 3e11 FLOPs
    run = {"step_s": [10.0], "phases": [{"gen": 4.0, "ref": 2.0}]}
    bench.add_trl_update([run])
    metrics = bench.trl_mfu(run["phases"][0], [60, 40], _LinearFlops(), peak_flops=1e11)
    assert metrics["perf/achieved_tflops/gen"] == 0.025 and metrics["perf/mfu/gen"] == 0.25
    assert metrics["perf/achieved_tflops/ref"] == 0.05 and metrics["perf/mfu/ref"] == 0.5
    assert metrics["perf/mfu/update_actor"] == 0.75 and metrics["perf/peak_tflops"] == 0.1


def test_sample_and_mfu_figures_are_medians_after_warmup(capsys):
    run = {"step_s": [50.0, 10.0, 12.0, 14.0], "phases": [{"gen": 9.0}, {"gen": 2.0}, {"gen": 4.0}, {"gen": 5.0}]}
    run["tokens"] = [0, 200, 200, 500]
    run["samples"] = [{"reward": 0.9, "response_length": 9}, {"reward": 0.1}, {"reward": 0.3}, {"reward": 0.2}]
    run["mfu"] = [{"perf/mfu/gen": 0.9}, {"perf/mfu/gen": 0.1}, {"perf/mfu/gen": 0.2}, {"perf/mfu/gen": 0.4}]
    run["memory"] = _memory(1.0)
    bench.emit_side("trl", [run], ("gen",))
    figures = {line["figure"]: line["value"] for line in map(json.loads, capsys.readouterr().out.splitlines())}
    assert figures["trl_reward"] == 0.2 and "trl_response_length" not in figures  # only the warm-up step had it
    assert figures["trl_mfu_gen"] == 0.2
    assert figures["trl_gen_tokens_per_s"] == 100.0  # per step 200/2, 200/4, 500/5
