"""`actor_rollout_ref.rollout`: the inference engine, its sampling, and the multi-turn options."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig
from verl.utils.debug import ProfilerConfig

__all__ = [
    "AgentLoopConfig",
    "CheckpointEngineConfig",
    "EngineKwargsConfig",
    "MultiTurnConfig",
    "RolloutConfig",
    "SamplingConfig",
]


@dataclass
class SamplingConfig(BaseConfig):
    """`rollout.val_kwargs`: how validation samples (greedy by default)."""

    top_k: int = -1
    top_p: float = 1.0
    temperature: float = 0.0
    n: int = 1
    do_sample: bool = False


@dataclass
class EngineKwargsConfig(BaseConfig):
    """`rollout.engine_kwargs`: extra arguments per engine (null values are dropped)."""

    vllm: dict = field(default_factory=lambda: {"swap_space": None, "disable_mm_preprocessor_cache": False})
    sglang: dict = field(default_factory=lambda: {"attention_backend": None})


@dataclass
class MultiTurnConfig(BaseConfig):
    """`rollout.multi_turn`: tool calling and interactions over several turns."""

    enable: bool = False
    max_assistant_turns: int | None = None
    tool_config_path: str | None = None
    max_user_turns: int | None = None
    interaction_config_path: str | None = None
    completion_callback: str | None = None
    use_inference_chat_template: bool = False
    tokenization_sanity_check_mode: str = "strict"
    format: str = "hermes"
    max_parallel_calls: int | None = 1
    max_tool_response_length: int = 256
    tool_response_truncate_side: str = "middle"
    tool_call_timeout: float | None = 30


@dataclass
class AgentLoopConfig(BaseConfig):
    """`rollout.agent`: the agent loops of multi-turn and async rollouts."""

    agent_loop_config_path: str | None = None
    default_agent_loop: str | None = None


@dataclass
class CheckpointEngineConfig(BaseConfig):
    """`rollout.checkpoint_engine`: how a trainer's weights reach a rollout on workers of its own."""

    backend: str = "naive"
    update_weights_bucket_megabytes: float = 2048
    engine_kwargs: dict = field(default_factory=dict)


@dataclass
class RolloutConfig(BaseConfig):
    """`actor_rollout_ref.rollout`. Any other key naming a vLLM `SamplingParams` attribute is passed to sampling."""

    # "???": Hydra's mark of a value the command line must give (verl 0.9 has no default engine)
    name: str = "???"
    mode: str = "sync"
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    use_fire_sampling: bool = False
    prompt_length: int = 512
    response_length: int = 512
    dtype: str = "bfloat16"
    gpu_memory_utilization: float = 0.5
    ignore_eos: bool = False
    enforce_eager: bool = True
    free_cache_engine: bool = True
    load_format: str = "dummy"
    layered_summon: bool = False
    tensor_model_parallel_size: int = 2
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    max_num_seqs: int = 256
    log_prob_micro_batch_size: int | None = None
    log_prob_micro_batch_size_per_gpu: int | None = None
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    disable_log_stats: bool = True
    enable_chunked_prefill: bool = True
    do_sample: bool = True
    n: int = 1
    multi_stage_wake_up: bool = False
    engine_kwargs: EngineKwargsConfig = field(default_factory=EngineKwargsConfig)
    val_kwargs: SamplingConfig = field(default_factory=SamplingConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    agent: AgentLoopConfig = field(default_factory=AgentLoopConfig)
    calculate_log_probs: bool = True
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    seed: int = 42
    limit_images: int | None = None
    micro_batch_size: int | None = None
    cpu_num_threads: int | None = None
    logprobs_mode: str = "processed_logprobs"
    kv_cache_sequences: int | None = None
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)

    @property
    def uses_agent_loops(self) -> bool:
        """Whether the agent-loop rollout runs (its output carries ``loss_mask``, which the update then uses)."""
        return self.multi_turn.enable or self.mode == "async"

    @property
    def effective_max_model_len(self) -> int:
        """`max_model_len`, or prompt_length + response_length when it is null."""
        return self.max_model_len or self.prompt_length + self.response_length
