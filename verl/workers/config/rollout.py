"""`actor_rollout_ref.rollout`: the inference engine, its sampling, and the multi-turn options."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig
from verl.utils.debug import ProfilerConfig
from verl.workers.config.engine import QATEngineConfig
from verl.workers.config.model import MtpConfig

__all__ = [
    "AgentLoopConfig",
    "CheckpointEngineConfig",
    "CustomAsyncServerConfig",
    "DisaggregationConfig",
    "EngineKwargsConfig",
    "MultiTurnConfig",
    "PrometheusConfig",
    "RolloutConfig",
    "SamplingConfig",
    "TraceConfig",
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
    trtllm: dict = field(default_factory=dict)


@dataclass
class MultiTurnConfig(BaseConfig):
    """`rollout.multi_turn`: tool calling and interactions over several turns."""

    enable: bool = False
    max_assistant_turns: int | None = None
    tool_config_path: str | None = None
    function_tool_path: str | None = None
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
    num_repeat_rollouts: int | None = None


@dataclass
class CustomAsyncServerConfig(BaseConfig):
    """`rollout.agent.custom_async_server`: a server class of the user's (verl's server mode; only null here)."""

    path: str | None = None
    name: str | None = None


@dataclass
class AgentLoopConfig(BaseConfig):
    """`rollout.agent`: the agent loops of multi-turn and async rollouts."""

    num_workers: int = 8
    agent_loop_config_path: str | None = None
    default_agent_loop: str | None = None
    custom_async_server: CustomAsyncServerConfig = field(default_factory=CustomAsyncServerConfig)


@dataclass
class CheckpointEngineConfig(BaseConfig):
    """`rollout.checkpoint_engine`: how a trainer's weights reach a rollout on workers of its own."""

    backend: str = "naive"
    update_weights_bucket_megabytes: float = 2048
    engine_kwargs: dict = field(default_factory=dict)
    custom_backend_module: str | None = None


@dataclass
class TraceConfig(BaseConfig):
    """`rollout.trace`: per-trajectory tracing of the agent loops (verl; only backend=null here)."""

    project_name: str | None = "verl_examples"
    experiment_name: str | None = "gsm8k"
    backend: str | None = None
    token2text: bool = False
    max_samples_per_step_per_worker: int | None = None


@dataclass
class PrometheusConfig(BaseConfig):
    """`rollout.prometheus`: metrics of a served engine (verl's server mode; only enable=False here)."""

    enable: bool = False
    port: int = 9090
    file: str = "/tmp/ray/session_latest/metrics/prometheus/prometheus.yml"
    served_model_name: str | None = "~/models/deepseek-llm-7b-chat"


@dataclass
class DisaggregationConfig(BaseConfig):
    """`rollout.disaggregation`: prefill and decode on separate engines (verl, SGLang only; only enabled=False)."""

    enabled: bool = False
    prefill_replicas: int = 1
    decode_replicas: int = 1
    decode_tensor_model_parallel_size: int | None = None
    transfer_backend: str = "nixl"
    bootstrap_port: int | None = None
    ib_device: str | None = None


@dataclass
class RolloutConfig(BaseConfig):
    """`actor_rollout_ref.rollout`. Any other key naming a vLLM `SamplingParams` attribute is passed to sampling."""

    # "???": Hydra's mark of a value the command line must give (verl 0.9 has no default engine)
    name: str = "???"
    mode: str = "sync"
    nnodes: int = 0
    n_gpus_per_node: int = 8
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    use_fire_sampling: bool = False
    full_determinism: bool = False
    prompt_length: int = 512
    response_length: int = 512
    dtype: str = "bfloat16"
    gpu_memory_utilization: float = 0.5
    ignore_eos: bool = False
    enforce_eager: bool = True
    cudagraph_capture_sizes: list[int] | None = None
    free_cache_engine: bool = True
    load_format: str = "dummy"
    layered_summon: bool = False
    tensor_model_parallel_size: int = 2
    data_parallel_size: int = 1
    expert_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    max_num_seqs: int = 256
    log_prob_micro_batch_size: int | None = None
    log_prob_micro_batch_size_per_gpu: int | None = None
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    disable_log_stats: bool = True
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    scheduling_policy: str = "fcfs"
    do_sample: bool = True
    n: int = 1
    over_sample_rate: float = 0.0
    multi_stage_wake_up: bool = False
    engine_kwargs: EngineKwargsConfig = field(default_factory=EngineKwargsConfig)
    val_kwargs: SamplingConfig = field(default_factory=SamplingConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    agent: AgentLoopConfig = field(default_factory=AgentLoopConfig)
    calculate_log_probs: bool = False
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    seed: int = 42
    limit_images: int | None = None
    micro_batch_size: int | None = None
    cpu_num_threads: int | None = None
    logprobs_mode: str = "processed_logprobs"
    kv_cache_sequences: int | None = None
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    skip_tokenizer_init: bool = True
    enable_rollout_routing_replay: bool = False
    moe_load_balance_metrics_interval: int = 0
    quantization: str | None = None
    quantization_config_file: str | None = None
    mtp: MtpConfig = field(default_factory=MtpConfig)
    # follows the actor's engine block (its fsdp_config.qat, or megatron.qat under Megatron)
    qat: QATEngineConfig | None = field(default_factory=QATEngineConfig)
    router_config_path: str | None = None
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    disaggregation: DisaggregationConfig = field(default_factory=DisaggregationConfig)

    @property
    def uses_agent_loops(self) -> bool:
        """Whether the agent-loop rollout runs (its output carries ``loss_mask``, which the update then uses)."""
        return self.multi_turn.enable or self.mode == "async"

    @property
    def effective_max_model_len(self) -> int:
        """`max_model_len`, or prompt_length + response_length when it is null."""
        return self.max_model_len or self.prompt_length + self.response_length
