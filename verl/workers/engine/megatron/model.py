"""A Hugging Face decoder's config as a megatron-core ``GPTModel`` (local layer spec), and its forward on padded
batches.

Families: Qwen2 / Qwen2.5 (biases on q, k, v), Qwen3 (q/k norms), Qwen3-MoE (every layer's MLP a mixture of experts:
megatron-core's top-k router and SequentialMLP experts, no shared expert) and Llama (Llama 3.1's rope scaling):
grouped-query attention, SwiGLU, RMSNorm, rotary embeddings with the HF config's theta and scaling, tied or separate
input and output embeddings. The vocabulary is padded up to a multiple of the tensor-parallel size (megatron-core
splits it evenly); the padded columns are cut from the logits, so they never enter a softmax.

Sequence parallelism (``sequence_parallel`` at tensor parallel > 1): megatron-core keeps the activations outside the
attention and MLP split along the sequence over the tensor-parallel ranks (all-gathered into each column-parallel
linear, reduce-scattered out of each row-parallel one). The norms then see this rank's positions only, so they are
:class:`RMSNorm` (megatron-core's torch-norm wrapper refuses sequence parallelism) with their weights' gradients summed
over the tensor-parallel group (:func:`sum_partial_gradients`), and each micro batch is padded to a multiple of the
tensor-parallel size (:func:`pad_sequence_for_parallelism`; the padding columns are masked and cut off).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "RMSNorm",
    "ModelChunks",
    "ScalarHead",
    "build_gpt_model",
    "build_model_chunks",
    "causal_padding_mask",
    "check_supported",
    "gpt_logits",
    "hf_inv_freq",
    "model_chunks",
    "pad_sequence_for_parallelism",
    "padded_vocab_size",
    "sum_partial_gradients",
    "transformer_config",
]

SUPPORTED_MODEL_TYPES = ("qwen2", "llama", "qwen3", "qwen3_moe")
QK_NORM_MODEL_TYPES = ("qwen3", "qwen3_moe")  # RMSNorm over each head's queries and keys before rope (q_norm / k_norm)
MOE_MODEL_TYPES = ("qwen3_moe",)  # every decoder layer's MLP a mixture of experts (router, experts, no shared one)


def num_experts(hf_config) -> int:
    """The number of routed experts of a mixture-of-experts model's layers; 0 for a dense model."""
    if hf_config.model_type not in MOE_MODEL_TYPES:
        return 0
    return int(getattr(hf_config, "num_experts", None) or getattr(hf_config, "num_local_experts", 0))


def _rope_parameters(hf_config) -> dict:
    """``{"rope_type", "rope_theta", ...}`` from either transformers layout (``rope_parameters`` in 5.x,
    ``rope_theta`` + ``rope_scaling`` before)."""
    params = getattr(hf_config, "rope_parameters", None)
    if params:
        return dict(params)
    params = dict(getattr(hf_config, "rope_scaling", None) or {})
    params.setdefault("rope_type", params.get("type", "default"))
    params["rope_theta"] = getattr(hf_config, "rope_theta", 10000.0)
    return params


def check_supported(hf_config) -> None:
    """Raise ValueError naming what megatron-core here cannot build the same model for."""
    model_type = hf_config.model_type
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"strategy=megatron builds {', '.join(SUPPORTED_MODEL_TYPES)} models; this model's model_type is "
            f"{model_type!r}: use strategy=fsdp2 for it"
        )
    rope_type = _rope_parameters(hf_config)["rope_type"]
    if rope_type not in ("default", "linear", "llama3"):
        raise ValueError(
            f"strategy=megatron: rope_type={rope_type!r} changes more than the rotary frequencies (attention scaling "
            "or sequence-length dependence); supported: default, linear, llama3. Use strategy=fsdp2 for this model"
        )
    if getattr(hf_config, "sliding_window", None) and getattr(hf_config, "use_sliding_window", False):
        raise ValueError("strategy=megatron: sliding-window attention is not built here; use strategy=fsdp2")
    if model_type in MOE_MODEL_TYPES:
        dense = list(getattr(hf_config, "mlp_only_layers", None) or [])
        step = getattr(hf_config, "decoder_sparse_step", 1) or 1
        if dense or step != 1:
            raise ValueError(
                f"strategy=megatron: mlp_only_layers={dense} / decoder_sparse_step={step} mix dense and expert layers; "
                "only models whose every layer is a mixture of experts (mlp_only_layers=[], decoder_sparse_step=1) "
                "are built here. Use strategy=fsdp2 for this model"
            )


def hf_inv_freq(hf_config) -> torch.Tensor:
    """The rotary inverse frequencies ``(head_dim // 2,)`` as transformers computes them for this config (theta and
    scaling), in float32."""
    params = _rope_parameters(hf_config)
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    if params["rope_type"] == "default":
        exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
        return 1.0 / (params["rope_theta"] ** exponents)
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, attention_scaling = ROPE_INIT_FUNCTIONS[params["rope_type"]](hf_config, "cpu")
    if attention_scaling != 1.0:
        raise ValueError(f"rope_type={params['rope_type']!r} scales attention by {attention_scaling}: not supported")
    return inv_freq.float()


def padded_vocab_size(vocab_size: int, tp_size: int) -> int:
    """The vocabulary rounded up to a multiple of the tensor-parallel size."""
    return -(-vocab_size // tp_size) * tp_size


def transformer_config(
    hf_config,
    tp_size: int = 1,
    pp_size: int = 1,
    dtype: torch.dtype = torch.float32,
    sequence_parallel: bool = False,
    vpp_size: int | None = None,
    **overrides,
):
    """The megatron-core ``TransformerConfig`` of ``hf_config``'s decoder: no fusions (none runs on CPU, and the
    unfused forms compute what HF computes), no dropout, weights left for the converter to load.

    ``sequence_parallel``: split the activations along the sequence over the tensor-parallel ranks (only where
    ``tp_size > 1``: there is nothing to split over otherwise, as in verl). ``vpp_size``: model chunks per
    pipeline stage (``virtual_pipeline_model_parallel_size``; None: one). ``overrides``:
    ``override_transformer_config`` entries, applied last.
    """
    from megatron.core.transformer import TransformerConfig

    check_supported(hf_config)
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    qkv_bias = hf_config.model_type == "qwen2" or bool(getattr(hf_config, "attention_bias", False))
    kwargs = dict(
        num_layers=hf_config.num_hidden_layers,
        hidden_size=hf_config.hidden_size,
        num_attention_heads=hf_config.num_attention_heads,
        num_query_groups=hf_config.num_key_value_heads,
        kv_channels=head_dim,
        ffn_hidden_size=hf_config.intermediate_size,
        normalization="RMSNorm",
        layernorm_epsilon=hf_config.rms_norm_eps,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=bool(getattr(hf_config, "mlp_bias", False)),
        add_qkv_bias=qkv_bias,
        qk_layernorm=hf_config.model_type in QK_NORM_MODEL_TYPES,
        hidden_dropout=0.0,
        attention_dropout=float(getattr(hf_config, "attention_dropout", 0.0) or 0.0),
        tensor_model_parallel_size=tp_size,
        pipeline_model_parallel_size=pp_size,
        virtual_pipeline_model_parallel_size=vpp_size,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu_initialization=True,
        perform_initialization=False,
        sequence_parallel=sequence_parallel and tp_size > 1,
        persist_layer_norm=False,
        masked_softmax_fusion=False,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        attention_softmax_in_fp32=True,
    )
    experts = num_experts(hf_config)
    if experts:
        # Qwen3-MoE's router: softmax over all experts, the top k kept and, with norm_topk_prob, renormalised; the
        # same as megatron-core's softmax over the top k logits (pre_softmax=False), or its softmax over all
        # (pre_softmax=True) without renormalising. No auxiliary loss: transformers adds it only to a loss it
        # computes from labels, which the actor never passes.
        kwargs.update(
            num_moe_experts=experts,
            moe_router_topk=hf_config.num_experts_per_tok,
            moe_ffn_hidden_size=hf_config.moe_intermediate_size,
            moe_router_score_function="softmax",
            moe_router_pre_softmax=not getattr(hf_config, "norm_topk_prob", False),
            moe_router_load_balancing_type="none",
            moe_aux_loss_coeff=0.0,
            moe_router_dtype="fp32",
            moe_token_dispatcher_type="allgather",
            moe_grouped_gemm=False,
            moe_permute_fusion=False,
        )
    kwargs.update(overrides)
    return TransformerConfig(**kwargs)


class RMSNorm(torch.nn.RMSNorm):
    """torch's RMSNorm built as megatron-core builds a norm (``config, hidden_size, eps``), also under sequence
    parallelism: where its input is this rank's share of the positions (``sequence_parallel``, default the config's),
    its weight is tagged ``sequence_parallel`` and its gradient summed over the tensor-parallel group by
    :func:`sum_partial_gradients`. The query / key norms act on whole sequences (after the gather) and pass False."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, sequence_parallel: bool | None = None, **unused):
        if config.normalization != "RMSNorm":
            raise ValueError(f"normalization={config.normalization!r}: this norm is RMSNorm only")
        super().__init__(normalized_shape=hidden_size, eps=eps)
        split = config.sequence_parallel if sequence_parallel is None else sequence_parallel
        self.weight.sequence_parallel = bool(split)


def _layer_spec(config, vp_stage: int | None = None):
    """The local layer spec of :func:`build_gpt_model` (with megatron-core's MoE layer where ``config`` has experts),
    every norm (the final one too) an :class:`RMSNorm`, for the layers of this pipeline stage's chunk ``vp_stage``."""
    import dataclasses

    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build

    spec = get_gpt_layer_local_spec(
        num_experts=config.num_moe_experts,
        moe_grouped_gemm=False,
        qk_layernorm=config.qk_layernorm,
        normalization="RMSNorm",
    )
    attention = spec.submodules.self_attention
    attention_submodules = attention.submodules
    if config.qk_layernorm:
        qk_norm = ModuleSpec(module=RMSNorm, params={"sequence_parallel": False})
        attention_submodules = dataclasses.replace(attention_submodules, q_layernorm=qk_norm, k_layernorm=qk_norm)
    layer = dataclasses.replace(
        spec.submodules,
        input_layernorm=RMSNorm,
        pre_mlp_layernorm=RMSNorm,
        self_attention=ModuleSpec(module=attention.module, params=attention.params, submodules=attention_submodules),
    )
    layer_spec = ModuleSpec(module=spec.module, params=spec.params, submodules=layer)
    layers = get_num_layers_to_build(config, vp_stage=vp_stage)
    return TransformerBlockSubmodules(layer_specs=[layer_spec] * layers, layer_norm=RMSNorm)


def pad_sequence_for_parallelism(
    config, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Under sequence parallelism, ``(b, s)`` inputs padded on the right to a multiple of the tensor-parallel size
    (each rank holds an equal share of the positions): the new columns are masked out (no real position attends to
    them, and their outputs are cut off by the caller). Unchanged otherwise."""
    if not config.sequence_parallel:
        return input_ids, attention_mask, position_ids
    missing = -input_ids.shape[-1] % config.tensor_model_parallel_size
    if missing == 0:
        return input_ids, attention_mask, position_ids
    return tuple(F.pad(t, (0, missing)) for t in (input_ids, attention_mask, position_ids))


class ScalarHead(torch.nn.Module):
    """The value (critic) or reward head on the last pipeline stage in place of the LM output layer: HF's token-
    classification ``score`` (``Linear(hidden, 1)``), replicated on every tensor-parallel rank (its input, the final
    hidden states, is replicated there too, so every rank computes the same output and gradient).

    Called as ``GPTModel`` calls its output layer: ``head(hidden_states (s, b, hidden)) -> ((s, b, 1), None)``.
    """

    def __init__(
        self, hidden_size: int, bias: bool, dtype: torch.dtype, std: float, seed: int, sequence_parallel: bool = False
    ):
        super().__init__()
        # as transformers initialises a score head the folder lacks: normal(0, initializer_range), zero bias; seeded,
        # so every tensor-parallel rank starts from the same head
        generator = torch.Generator().manual_seed(seed)
        self.weight = torch.nn.Parameter(torch.randn(1, hidden_size, generator=generator).mul_(std).to(dtype))
        self.bias = torch.nn.Parameter(torch.zeros(1, dtype=dtype)) if bias else None
        self.sequence_parallel = sequence_parallel  # read by GPTModel's inference path

    def forward(self, hidden_states: torch.Tensor, weight=None, runtime_gather_output=None):
        if self.sequence_parallel:
            from megatron.core.tensor_parallel import gather_from_sequence_parallel_region

            # every rank computes the whole output and the same loss from it, so the gradient of the gathered tensor
            # is whole on each rank: its backward keeps this rank's share (no sum over ranks)
            hidden_states = gather_from_sequence_parallel_region(hidden_states, tensor_parallel_output_grad=False)
        return F.linear(hidden_states, self.weight, self.bias), None


def build_gpt_model(
    hf_config,
    config,
    pre_process: bool = True,
    post_process: bool = True,
    scalar_head: bool = False,
    seed: int = 42,
    vp_stage: int | None = None,
):
    """A ``GPTModel`` (local layer spec) of ``hf_config`` under ``config`` (:func:`transformer_config`) for this
    rank's pipeline stage; full (gathered) logits over the real vocabulary come from :func:`gpt_logits`.

    ``scalar_head``: a value / reward model, whose last stage ends in a :class:`ScalarHead` (initialised from
    ``seed``; the converter loads the folder's ``score`` head over it where there is one) instead of the LM head;
    its input embedding is then never tied to an output layer. ``vp_stage``: which of this stage's model chunks
    (virtual pipeline), see :func:`build_model_chunks`."""
    from megatron.core.models.gpt import GPTModel

    from verl.workers.engine.megatron.cpu_shims import cover_missing_transformer_engine, cpu_current_device

    if config.num_moe_experts:
        cover_missing_transformer_engine()
    params = _rope_parameters(hf_config)
    with cpu_current_device():
        model = GPTModel(
            config=config,
            transformer_layer_spec=_layer_spec(config, vp_stage),
            vocab_size=padded_vocab_size(hf_config.vocab_size, config.tensor_model_parallel_size),
            max_sequence_length=hf_config.max_position_embeddings,
            pre_process=pre_process,
            post_process=post_process,
            parallel_output=False,
            share_embeddings_and_output_weights=bool(hf_config.tie_word_embeddings) and not scalar_head,
            position_embedding_type="rope",
            rotary_base=params["rope_theta"],
            vp_stage=vp_stage,
        )
    # theta and any scaling exactly as transformers computes them (megatron-core's llama3 scaling is fixed-constant)
    model.rotary_pos_emb.inv_freq = hf_inv_freq(hf_config).to(model.rotary_pos_emb.inv_freq.device)
    model.hf_vocab_size = hf_config.vocab_size
    model.scalar_head = scalar_head
    if scalar_head and post_process:
        bias = bool(getattr(hf_config, "token_classification_bias", True))  # as transformers builds the head
        std = getattr(hf_config, "initializer_range", None) or 0.02
        model.output_layer = ScalarHead(
            hf_config.hidden_size, bias, config.params_dtype, std, seed, sequence_parallel=config.sequence_parallel
        )
    _mark_tensor_parallel(model)
    if pre_process:
        _freeze_padding_row(model.embedding.word_embeddings, getattr(hf_config, "pad_token_id", None))
    return model


class ModelChunks(torch.nn.ModuleList):
    """This rank's model chunks under virtual pipeline parallelism (``virtual_pipeline_model_parallel_size`` = v):
    chunk ``c`` of pipeline stage ``p`` is virtual stage ``c * pp + p`` of the ``pp * v`` the layers are cut into, so
    a micro batch passes every stage v times (interleaved layout). The input embedding lives on the first stage's
    first chunk, the final norm and output layer on the last stage's last chunk; the attributes the engine reads of
    one ``GPTModel`` answer for the chunk that holds them."""

    @property
    def config(self):
        return self[0].config

    @property
    def pre_process(self) -> bool:
        return self[0].pre_process

    @property
    def post_process(self) -> bool:
        return self[-1].post_process

    @property
    def embedding(self):
        return self[0].embedding

    @property
    def output_layer(self):
        return self[-1].output_layer

    @property
    def share_embeddings_and_output_weights(self) -> bool:
        return self[0].share_embeddings_and_output_weights

    @property
    def scalar_head(self) -> bool:
        return self[0].scalar_head


def model_chunks(model) -> list:
    """The ``GPTModel`` chunks of ``model`` (a :class:`ModelChunks` or one ``GPTModel``), first to last."""
    return list(model) if isinstance(model, ModelChunks) else [model]


def build_model_chunks(hf_config, config, scalar_head: bool = False, seed: int = 42):
    """This rank's model for its pipeline stage: one ``GPTModel`` (:func:`build_gpt_model`), or with
    ``config.virtual_pipeline_model_parallel_size`` a :class:`ModelChunks` of that many (megatron-core places each
    chunk's layers by its ``vp_stage``). Needs megatron-core's groups (:func:`~verl.workers.engine.megatron.parallel.
    init_model_parallel`) of the same sizes."""
    from megatron.core import parallel_state

    vpp = config.virtual_pipeline_model_parallel_size
    if vpp is None:
        return build_gpt_model(
            hf_config,
            config,
            pre_process=parallel_state.is_pipeline_first_stage(),
            post_process=parallel_state.is_pipeline_last_stage(),
            scalar_head=scalar_head,
            seed=seed,
        )
    chunks = [
        build_gpt_model(
            hf_config,
            config,
            pre_process=parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=stage),
            post_process=parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=stage),
            scalar_head=scalar_head,
            seed=seed,
            vp_stage=stage,
        )
        for stage in range(vpp)
    ]
    return ModelChunks(chunks)


def _mark_tensor_parallel(model) -> None:
    """Tag each tensor-parallel shard with megatron-core's ``tensor_model_parallel`` attributes: megatron-core sets
    them only when it initialises the weights itself (``perform_initialization``), and the gradient norm must count
    the shards of every rank but a replicated tensor (a norm, a row-parallel bias) once."""
    from megatron.core.tensor_parallel.layers import (
        ColumnParallelLinear,
        RowParallelLinear,
        VocabParallelEmbedding,
        set_tensor_model_parallel_attributes,
    )

    for module in model.modules():
        if isinstance(module, ColumnParallelLinear | VocabParallelEmbedding):
            sharded = [(module.weight, 0), (getattr(module, "bias", None), 0)]
        elif isinstance(module, RowParallelLinear):
            sharded = [(module.weight, 1)]
        else:
            continue
        for param, dim in sharded:
            if param is not None and not getattr(param, "tensor_model_parallel", False):
                set_tensor_model_parallel_attributes(param, is_parallel=True, dim=dim, stride=1)


def sum_partial_gradients(model) -> None:
    """Sum over the tensor-parallel group the gradients of replicated tensors that each rank sees only part of: the
    query and key norms (Qwen3's q_norm / k_norm, ``(head_dim,)``) act on this rank's heads only, and under sequence
    parallelism the other norms (tagged ``sequence_parallel``) on this rank's positions only, so each rank holds the
    gradient from its share. Collective over the tensor-parallel group; a no-op at tensor parallel 1."""
    from megatron.core import parallel_state

    if parallel_state.get_tensor_model_parallel_world_size() == 1:
        return
    grads = [
        p.grad
        for name, p in model.named_parameters()
        if p.grad is not None
        and (name.endswith(("q_layernorm.weight", "k_layernorm.weight")) or getattr(p, "sequence_parallel", False))
    ]
    if not grads:
        return
    flat = torch._utils._flatten_dense_tensors(grads)
    torch.distributed.all_reduce(flat, group=parallel_state.get_tensor_model_parallel_group())
    for grad, summed in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
        grad.copy_(summed)


def _freeze_padding_row(embedding, pad_token_id: int | None) -> None:
    """HF builds Qwen2's and Llama's input embedding with ``padding_idx=pad_token_id``: a lookup of that token passes
    no gradient to its row. Do the same: the lookup's output at padding tokens is detached. With tied embeddings the
    row still gets the output layer's gradient, as in transformers (a hook on the weight would zero both)."""
    if pad_token_id is None:
        return

    def detach_padding(module, args, output):
        token_ids = args[0]  # (b, s)
        if module.reduce_scatter_embeddings:  # sequence parallel: the output is this rank's positions, (s / tp, b, h)
            from megatron.core import parallel_state

            token_ids = token_ids.t().chunk(parallel_state.get_tensor_model_parallel_world_size())[
                parallel_state.get_tensor_model_parallel_rank()
            ]
        is_padding = (token_ids == pad_token_id).unsqueeze(-1)
        return torch.where(is_padding, output.detach(), output) if bool(is_padding.any()) else output

    embedding.register_forward_hook(detach_padding)


def causal_padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """megatron-core's boolean attention mask ``(b, 1, s, s)`` (True = not attended) from a padding mask
    ``(b, s)``: causal, and no attention to padding keys."""
    seqlen = attention_mask.shape[-1]
    causal = torch.ones(seqlen, seqlen, dtype=torch.bool, device=attention_mask.device).tril()
    allowed = causal.unsqueeze(0) & attention_mask.bool().unsqueeze(1)
    return ~allowed.unsqueeze(1)


def gpt_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor):
    """Logits ``(b, s, vocab)`` over the HF vocabulary (padding columns cut) of a single-stage ``GPTModel``.

    Rotary positions are the column index: for left-padded rows they differ from ``position_ids`` by a constant per
    row, which rotary attention does not see (it depends on position differences only).
    """
    from verl.workers.engine.megatron.cpu_shims import cpu_current_device

    seq_len = input_ids.shape[-1]
    input_ids, attention_mask, position_ids = pad_sequence_for_parallelism(
        model.config, input_ids, attention_mask, position_ids
    )
    with cpu_current_device():
        mask = causal_padding_mask(attention_mask)
        logits = model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask)
    return logits[:, :seq_len, : model.hf_vocab_size]
