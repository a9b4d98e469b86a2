"""Weights between a Hugging Face folder (Qwen2 / Qwen3 / Llama names) and a tensor- and pipeline-parallel ``GPTModel``.

In: :func:`load_hf_weights` reads, for this rank's pipeline stage, each HF tensor it needs from the folder's
safetensors files (one tensor at a time) and copies this rank's tensor-parallel slice into the module.

Out: :func:`iter_hf_weights` yields ``(hf_name, full_tensor)`` layer by layer on every rank: the tensor-parallel
shards of one layer are all-gathered, the owning pipeline stage broadcasts them to the others, and the next layer is
gathered only when the consumer asks for it, so the hand-off to a rollout never holds a second full copy of the
model (about one layer's tensors at a time).

Layouts (``g`` query groups = KV heads, ``q = heads // g`` query heads per group, head size ``d``): Megatron's fused
``linear_qkv`` rows are, per query group, its ``q`` query heads, then its key head, then its value head; a
tensor-parallel rank holds ``g / tp`` whole groups. ``linear_fc1`` stacks this rank's slice of ``gate_proj`` on its
slice of ``up_proj``. ``linear_proj`` and ``linear_fc2`` are split along their input dimension, the embedding and the
output layer along the (padded) vocabulary.

Mixture of experts (Qwen3-MoE): HF's router ``mlp.gate`` is Megatron's ``mlp.router`` (replicated); expert ``e``'s
``mlp.experts.{e}.{gate,up,down}_proj`` (the checkpoint's per-expert names, which vLLM loads and
``save_pretrained`` writes) is local expert ``e % n_local`` of expert-parallel rank ``e // n_local``, its
``linear_fc1`` / ``linear_fc2`` split over the expert tensor-parallel group as a dense MLP's over tensor parallelism.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist

__all__ = [
    "HFCheckpointReader",
    "hf_layer_names",
    "iter_hf_weights",
    "load_hf_weights",
    "merge_stage_shards",
    "qkv_to_megatron",
]


class HFCheckpointReader:
    """Tensors of an HF model folder by name, read one at a time from its safetensors shards (or a
    ``pytorch_model.bin``, loaded whole)."""

    def __init__(self, folder: str):
        self.folder = folder
        index = os.path.join(folder, "model.safetensors.index.json")
        single = os.path.join(folder, "model.safetensors")
        self._state = None
        if os.path.isfile(index):
            with open(index) as f:
                self._files = {k: os.path.join(folder, v) for k, v in json.load(f)["weight_map"].items()}
        elif os.path.isfile(single):
            from safetensors import safe_open

            with safe_open(single, "pt") as f:
                self._files = dict.fromkeys(f.keys(), single)
        else:
            binary = os.path.join(folder, "pytorch_model.bin")
            if not os.path.isfile(binary):
                raise FileNotFoundError(f"no model.safetensors(.index.json) or pytorch_model.bin in {folder}")
            self._state = torch.load(binary, map_location="cpu", weights_only=True)
            self._files = dict.fromkeys(self._state, binary)

    def __contains__(self, name: str) -> bool:
        return name in self._files

    def get(self, name: str) -> torch.Tensor:
        if self._state is not None:
            return self._state[name]
        from safetensors import safe_open

        with safe_open(self._files[name], "pt") as f:
            return f.get_tensor(name)


def _dims(hf_config) -> tuple[int, int, int]:
    heads, groups = hf_config.num_attention_heads, hf_config.num_key_value_heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
    return heads, groups, head_dim


def qkv_to_megatron(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int) -> torch.Tensor:
    """HF's separate q, k, v projections (weights ``(heads*d, hidden)`` / ``(groups*d, hidden)`` or biases) as
    Megatron's fused ``linear_qkv``: per query group its query heads, key head, value head."""
    q = q.reshape(groups, -1, *q.shape[1:])
    k = k.reshape(groups, -1, *k.shape[1:])
    v = v.reshape(groups, -1, *v.shape[1:])
    return torch.cat([q, k, v], dim=1).reshape(-1, *q.shape[2:])


def qkv_to_hf(qkv: torch.Tensor, hf_config) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`qkv_to_megatron` for the full (gathered) fused tensor."""
    heads, groups, head_dim = _dims(hf_config)
    per_group = heads // groups
    grouped = qkv.reshape(groups, (per_group + 2) * head_dim, *qkv.shape[1:])
    q, k, v = grouped.split([per_group * head_dim, head_dim, head_dim], dim=1)
    return (q.reshape(-1, *qkv.shape[1:]), k.reshape(-1, *qkv.shape[1:]), v.reshape(-1, *qkv.shape[1:]))


def _pad_vocab(weight: torch.Tensor, rows: int) -> torch.Tensor:
    missing = rows - weight.shape[0]
    return weight if missing == 0 else torch.cat([weight, weight.new_zeros(missing, *weight.shape[1:])])


def hf_layer_names(layer: int, qkv_bias: bool, qk_norm: bool = False, experts: int = 0) -> list[str]:
    """HF names of decoder layer ``layer``'s tensors, in the order :func:`iter_hf_weights` yields them
    (``qk_norm``: Qwen3's per-head query and key norms; ``experts``: a mixture-of-experts layer's routed experts)."""
    p = f"model.layers.{layer}."
    names = [p + "input_layernorm.weight"] + [p + f"self_attn.{x}_proj.weight" for x in "qkv"]
    if qkv_bias:
        names += [p + f"self_attn.{x}_proj.bias" for x in "qkv"]
    if qk_norm:
        names += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
    names += [p + "self_attn.o_proj.weight", p + "post_attention_layernorm.weight"]
    if experts:
        names.append(p + "mlp.gate.weight")
        return names + [p + f"mlp.experts.{e}.{x}_proj.weight" for e in range(experts) for x in ("gate", "up", "down")]
    return names + [p + f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")]


def _tp():
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_world_size(), parallel_state.get_tensor_model_parallel_rank()


def _expert_parallel() -> tuple[int, int, int, int]:
    """(expert-parallel size, rank, expert tensor-parallel size, rank)."""
    from megatron.core import parallel_state

    return (
        parallel_state.get_expert_model_parallel_world_size(),
        parallel_state.get_expert_model_parallel_rank(),
        parallel_state.get_expert_tensor_parallel_world_size(),
        parallel_state.get_expert_tensor_parallel_rank(),
    )


@torch.no_grad()
def load_hf_weights(model, hf_config, folder_or_reader) -> None:
    """Copy the HF folder's weights into ``model`` (this rank's pipeline stage and tensor-parallel slice).

    ``folder_or_reader``: an HF model folder, or any object with ``get(name) -> tensor`` (a state dict's
    ``__getitem__`` wrapped, for tests).
    """
    from verl.workers.engine.megatron.model import model_chunks

    reader = HFCheckpointReader(folder_or_reader) if isinstance(folder_or_reader, str) else folder_or_reader
    for chunk in model_chunks(model):  # one GPTModel, or this stage's virtual-pipeline chunks
        _load_chunk(chunk, hf_config, reader)


def _load_chunk(model, hf_config, reader) -> None:
    """:func:`load_hf_weights` for one ``GPTModel`` (its layers' ``layer_number`` is their global position)."""
    tp, rank = _tp()
    _, groups, _ = _dims(hf_config)

    def shard(tensor: torch.Tensor, dim: int) -> torch.Tensor:
        return tensor.chunk(tp, dim=dim)[rank]

    def put(param: torch.Tensor, value: torch.Tensor) -> None:
        if param.shape != value.shape:
            raise ValueError(f"shape {tuple(value.shape)} does not fit the Megatron parameter {tuple(param.shape)}")
        param.copy_(value.to(param.dtype))

    vocab_rows = None
    if model.pre_process:
        emb = model.embedding.word_embeddings.weight
        vocab_rows = emb.shape[0] * tp
        put(emb, shard(_pad_vocab(reader.get("model.embed_tokens.weight"), vocab_rows), 0))
    for layer in model.decoder.layers:
        i = layer.layer_number - 1
        p = f"model.layers.{i}."
        attn, mlp = layer.self_attention, layer.mlp
        put(layer.input_layernorm.weight, reader.get(p + "input_layernorm.weight"))
        qkv = [reader.get(p + f"self_attn.{x}_proj.weight") for x in "qkv"]
        put(attn.linear_qkv.weight, shard(qkv_to_megatron(*qkv, groups), 0))
        if attn.linear_qkv.bias is not None:
            biases = [reader.get(p + f"self_attn.{x}_proj.bias") for x in "qkv"]
            put(attn.linear_qkv.bias, shard(qkv_to_megatron(*biases, groups), 0))
        if attn.config.qk_layernorm:  # per head (head_dim,): replicated over tensor parallelism
            put(attn.q_layernorm.weight, reader.get(p + "self_attn.q_norm.weight"))
            put(attn.k_layernorm.weight, reader.get(p + "self_attn.k_norm.weight"))
        put(attn.linear_proj.weight, shard(reader.get(p + "self_attn.o_proj.weight"), 1))
        put(layer.pre_mlp_layernorm.weight, reader.get(p + "post_attention_layernorm.weight"))
        if hasattr(mlp, "router"):  # a mixture of experts: this rank's experts, split over expert tensor parallelism
            put(mlp.router.weight, reader.get(p + "mlp.gate.weight"))
            ep, ep_rank, etp, etp_rank = _expert_parallel()
            local = mlp.experts.local_experts
            for i, expert in enumerate(local):
                q = f"{p}mlp.experts.{ep_rank * len(local) + i}."
                gate, up = reader.get(q + "gate_proj.weight"), reader.get(q + "up_proj.weight")
                put(expert.linear_fc1.weight, torch.cat([gate.chunk(etp)[etp_rank], up.chunk(etp)[etp_rank]]))
                put(expert.linear_fc2.weight, reader.get(q + "down_proj.weight").chunk(etp, dim=1)[etp_rank])
            continue
        gate, up = reader.get(p + "mlp.gate_proj.weight"), reader.get(p + "mlp.up_proj.weight")
        put(mlp.linear_fc1.weight, torch.cat([shard(gate, 0), shard(up, 0)]))
        put(mlp.linear_fc2.weight, shard(reader.get(p + "mlp.down_proj.weight"), 1))
    if model.post_process:
        put(model.decoder.final_layernorm.weight, reader.get("model.norm.weight"))
        if getattr(model, "scalar_head", False):
            _load_scalar_head(model.output_layer, reader)
        elif not model.share_embeddings_and_output_weights:
            out = model.output_layer.weight
            put(out, shard(_pad_vocab(reader.get("lm_head.weight"), out.shape[0] * tp), 0))
        elif not model.pre_process:  # tied, last stage only: its copy of the embedding
            out = model.output_layer.weight
            put(out, shard(_pad_vocab(reader.get("model.embed_tokens.weight"), out.shape[0] * tp), 0))


def _load_scalar_head(head, reader) -> None:
    """A value / reward model's head from the folder's ``score`` (a sequence- or token-classification model; a
    missing bias is zero, as transformers initialises it); a causal-LM folder has none and the head keeps its
    initialisation, as the FSDP critic's does."""
    try:
        has_score = "score.weight" in reader
    except TypeError:  # a reader without membership (tests' plain state-dict getters)
        has_score = False
    if not has_score:
        return
    weight = reader.get("score.weight")
    if weight.shape != head.weight.shape:
        raise ValueError(f"score.weight {tuple(weight.shape)}: a value / reward model needs one label (1, hidden)")
    head.weight.copy_(weight.to(head.weight.dtype))
    if head.bias is not None:
        head.bias.copy_(reader.get("score.bias").to(head.bias.dtype) if "score.bias" in reader else 0.0)


def _gather_tp(tensor: torch.Tensor, dim: int, expert: bool = False) -> torch.Tensor:
    """``tensor``'s shards over the tensor-parallel group (``expert``: the expert tensor-parallel group) along
    ``dim``."""
    from megatron.core import parallel_state

    tp = _expert_parallel()[2] if expert else _tp()[0]
    if tp == 1:
        return tensor.detach().clone()
    group = (
        parallel_state.get_expert_tensor_parallel_group()
        if expert
        else parallel_state.get_tensor_model_parallel_group()
    )
    if dim == 0:  # gathered straight into the full tensor's row blocks: no second copy for a concatenation
        full = tensor.new_empty(tensor.shape[0] * tp, *tensor.shape[1:])
        dist.all_gather(list(full.chunk(tp, dim=0)), tensor.detach().contiguous(), group=group)
        return full
    parts = [torch.empty_like(tensor) for _ in range(tp)]
    dist.all_gather(parts, tensor.detach().contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def _layer_tensors(layer, hf_config) -> list[torch.Tensor]:
    """One decoder layer's full tensors in :func:`hf_layer_names` order (collective over the tensor-parallel group)."""
    attn, mlp = layer.self_attention, layer.mlp
    tp, _ = _tp()
    tensors = [layer.input_layernorm.weight.detach().clone()]
    tensors += qkv_to_hf(_gather_tp(attn.linear_qkv.weight, 0), hf_config)
    if attn.linear_qkv.bias is not None:
        tensors += qkv_to_hf(_gather_tp(attn.linear_qkv.bias, 0), hf_config)
    if attn.config.qk_layernorm:
        tensors += [attn.q_layernorm.weight.detach().clone(), attn.k_layernorm.weight.detach().clone()]
    tensors += [_gather_tp(attn.linear_proj.weight, 1), layer.pre_mlp_layernorm.weight.detach().clone()]
    if hasattr(mlp, "router"):
        return tensors + [mlp.router.weight.detach().clone()] + _expert_tensors(mlp.experts.local_experts)
    return tensors + _mlp_tensors(mlp, tp, expert=False)


def _mlp_tensors(mlp, tp: int, expert: bool) -> list[torch.Tensor]:
    """An MLP's full ``gate_proj``, ``up_proj``, ``down_proj`` from its tensor-parallel shards."""
    fc1 = _gather_tp(mlp.linear_fc1.weight, 0, expert)  # tp blocks of [gate_r; up_r]
    gate_up = [block.chunk(2, dim=0) for block in fc1.chunk(tp, dim=0)]
    return [
        torch.cat([g for g, _ in gate_up]),
        torch.cat([u for _, u in gate_up]),
        _gather_tp(mlp.linear_fc2.weight, 1, expert),
    ]


def _expert_tensors(local_experts) -> list[torch.Tensor]:
    """Every expert's full tensors in :func:`hf_layer_names` order: each local expert's gathered over expert tensor
    parallelism, then all experts over the expert-parallel group (rank ``r`` holds experts ``r * n_local ...``)."""
    from megatron.core import parallel_state

    ep, _, etp, _ = _expert_parallel()
    local = [t for expert in local_experts for t in _mlp_tensors(expert, etp, expert=True)]
    if ep == 1:
        return local
    per_rank = [[torch.empty_like(t) for t in local] for _ in range(ep)]
    group = parallel_state.get_expert_model_parallel_group()
    for i, t in enumerate(local):
        dist.all_gather([tensors[i] for tensors in per_rank], t.contiguous(), group=group)
    return [t for tensors in per_rank for t in tensors]


def _layer_shapes(hf_config, qkv_bias: bool, qk_norm: bool = False) -> list[tuple[int, ...]]:
    from verl.workers.engine.megatron.model import num_experts

    heads, groups, head_dim = _dims(hf_config)
    hidden, inter = hf_config.hidden_size, hf_config.intermediate_size
    shapes = [(hidden,), (heads * head_dim, hidden), (groups * head_dim, hidden), (groups * head_dim, hidden)]
    if qkv_bias:
        shapes += [(heads * head_dim,), (groups * head_dim,), (groups * head_dim,)]
    if qk_norm:
        shapes += [(head_dim,), (head_dim,)]
    shapes += [(hidden, heads * head_dim), (hidden,)]
    experts = num_experts(hf_config)
    if experts:
        inter = hf_config.moe_intermediate_size
        return shapes + [(experts, hidden)] + [(inter, hidden), (inter, hidden), (hidden, inter)] * experts
    return shapes + [(inter, hidden), (inter, hidden), (hidden, inter)]


def _first_layers(chunks: list) -> list[int]:
    """The global index of the first decoder layer of each chunk (-1 for a chunk without layers)."""
    return [chunk.decoder.layers[0].layer_number - 1 if len(chunk.decoder.layers) else -1 for chunk in chunks]


@torch.no_grad()
def iter_hf_weights(model, hf_config, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """``(hf_name, full tensor)`` for every weight of the HF model, the same sequence on every rank (collective over
    the tensor- and pipeline-parallel groups: every rank must run the generator to its end, in step).

    ``dtype``: cast each tensor (e.g. to the rollout's). With tied embeddings ``lm_head.weight`` is not yielded (HF
    folders omit it; engines tie it themselves).
    """
    from megatron.core import parallel_state

    from verl.workers.engine.megatron.model import model_chunks, num_experts

    chunks = model_chunks(model)  # with virtual pipeline stages: the embedding in the first, the head in the last
    pp = parallel_state.get_pipeline_model_parallel_world_size()
    pp_group = parallel_state.get_pipeline_model_parallel_group() if pp > 1 else None
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    pp_ranks = dist.get_process_group_ranks(pp_group) if pp > 1 else None
    qkv_bias, qk_norm = bool(model.config.add_qkv_bias), bool(model.config.qk_layernorm)
    vocab, hidden = hf_config.vocab_size, hf_config.hidden_size
    tied = bool(hf_config.tie_word_embeddings)
    cast: Callable[[torch.Tensor], torch.Tensor] = (lambda t: t) if dtype is None else (lambda t: t.to(dtype))

    # which stage holds which layers: every stage tells the others (first layer, count) of each of its chunks; the
    # layers are then yielded in HF order, whichever stage and chunk hold them
    spans = [(first, len(chunk.decoder.layers)) for first, chunk in zip(_first_layers(chunks), chunks)]
    if pp > 1:
        stage_spans = [None] * pp
        dist.all_gather_object(stage_spans, spans, group=pp_group)
    else:
        stage_spans = [spans]
    owners = sorted(
        (first + j, stage, c, j)
        for stage, spans in enumerate(stage_spans)
        for c, (first, n) in enumerate(spans)
        for j in range(n)
    )

    def from_stage(owner: int, make: Callable[[], list[torch.Tensor]], shapes: list[tuple[int, ...]]):
        if pp == 1:
            return make()
        if pp_rank == owner:
            tensors = [t.contiguous() for t in make()]
        else:
            param_dtype = model.config.params_dtype
            tensors = [torch.empty(s, dtype=param_dtype) for s in shapes]
        for t in tensors:
            dist.broadcast(t, src=pp_ranks[owner], group=pp_group)
        return tensors

    def vocab_tensor(module_weight_fn: Callable[[], torch.Tensor]) -> list[torch.Tensor]:
        return [_gather_tp(module_weight_fn(), 0)[:vocab]]

    first_chunk, model = chunks[0], chunks[-1]  # model: the last chunk (final norm and head on the last stage)
    (emb,) = from_stage(
        0, lambda: vocab_tensor(lambda: first_chunk.embedding.word_embeddings.weight), [(vocab, hidden)]
    )
    yield "model.embed_tokens.weight", cast(emb)
    del emb
    shapes = _layer_shapes(hf_config, qkv_bias, qk_norm)
    for layer, stage, c, j in owners:
        names = hf_layer_names(layer, qkv_bias, qk_norm, num_experts(hf_config))
        tensors = from_stage(stage, lambda c=c, j=j: _layer_tensors(chunks[c].decoder.layers[j], hf_config), shapes)
        for name, tensor in zip(names, tensors):
            yield name, cast(tensor)
        del tensors
    last = pp - 1
    (norm,) = from_stage(last, lambda: [model.decoder.final_layernorm.weight.detach().clone()], [(hidden,)])
    yield "model.norm.weight", cast(norm)
    if getattr(model, "scalar_head", False):  # a value / reward model: HF's token-classification head
        has_bias = bool(getattr(hf_config, "token_classification_bias", True))  # as build_gpt_model made it
        names, shapes = ["score.weight"], [(1, hidden)]
        if has_bias:
            names, shapes = names + ["score.bias"], shapes + [(1,)]

        def head_tensors():
            head = model.output_layer
            return [head.weight.detach().clone()] + ([head.bias.detach().clone()] if has_bias else [])

        for name, tensor in zip(names, from_stage(last, head_tensors, shapes)):
            yield name, cast(tensor)
    elif not tied:
        (head,) = from_stage(last, lambda: vocab_tensor(lambda: model.output_layer.weight), [(vocab, hidden)])
        yield "lm_head.weight", cast(head)


def _merge_mlp(linear: str, parts: list[torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """HF's ``{prefix}gate_proj`` / ``up_proj`` (``linear="linear_fc1.weight"``) or ``down_proj``
    (``"linear_fc2.weight"``) from an MLP's tensor-parallel shards ``parts``."""
    if linear == "linear_fc1.weight":
        gate_up = [part.chunk(2) for part in parts]
        gate, up = torch.cat([g for g, _ in gate_up]), torch.cat([u for _, u in gate_up])
        return {prefix + "gate_proj.weight": gate, prefix + "up_proj.weight": up}
    if linear == "linear_fc2.weight":
        return {prefix + "down_proj.weight": torch.cat(parts, dim=1)}
    raise KeyError(f"{prefix}{linear}: not a tensor of the MLP layout this merger knows")


def merge_stage_shards(shards: list[dict], hf_config, layer_offset: int) -> dict[str, torch.Tensor]:
    """HF-named full tensors of one pipeline stage from its tensor-parallel ranks' saved state dicts (``shards[r]``:
    tp rank r's ``GPTModel.state_dict()``), without megatron-core or a process group (the model merger's path).
    ``layer_offset``: the stage's first decoder layer. A tied model's output layer (a copy of the embedding on the
    last stage) is left out, as HF folders leave out ``lm_head.weight``."""
    vocab = hf_config.vocab_size
    tied = bool(hf_config.tie_word_embeddings)
    merged: dict[str, torch.Tensor] = {}
    for key, first in shards[0].items():
        if not torch.is_tensor(first) or key.endswith("_extra_state"):
            continue
        parts = [shard[key] for shard in shards]
        if key == "embedding.word_embeddings.weight":
            merged["model.embed_tokens.weight"] = torch.cat(parts)[:vocab]
        elif key == "output_layer.weight" and first.shape[0] == 1:  # a value / reward model's scalar head
            merged["score.weight"] = first  # replicated over tensor parallelism
        elif key == "output_layer.bias":
            merged["score.bias"] = first
        elif key == "output_layer.weight":
            if not tied:
                merged["lm_head.weight"] = torch.cat(parts)[:vocab]
        elif key == "decoder.final_layernorm.weight":
            merged["model.norm.weight"] = first
        elif key.startswith("decoder.layers."):
            local, rest = key[len("decoder.layers.") :].split(".", 1)
            p = f"model.layers.{layer_offset + int(local)}."
            if rest in ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias"):
                kind = rest.rsplit(".", 1)[1]
                q, k, v = qkv_to_hf(torch.cat(parts), hf_config)
                merged.update({p + f"self_attn.q_proj.{kind}": q, p + f"self_attn.k_proj.{kind}": k})
                merged[p + f"self_attn.v_proj.{kind}"] = v
            elif rest == "self_attention.linear_proj.weight":
                merged[p + "self_attn.o_proj.weight"] = torch.cat(parts, dim=1)
            elif rest in ("mlp.linear_fc1.weight", "mlp.linear_fc2.weight"):
                merged.update(_merge_mlp(rest.split(".", 1)[1], parts, p + "mlp."))
            elif rest == "mlp.router.weight":
                merged[p + "mlp.gate.weight"] = first  # replicated
            elif rest.startswith("mlp.experts.local_experts."):  # global expert indices (the merger renumbers them)
                expert, linear = rest[len("mlp.experts.local_experts.") :].split(".", 1)
                merged.update(_merge_mlp(linear, parts, f"{p}mlp.experts.{expert}."))
            elif rest == "input_layernorm.weight":
                merged[p + "input_layernorm.weight"] = first
            elif rest == "pre_mlp_layernorm.weight":
                merged[p + "post_attention_layernorm.weight"] = first
            elif rest in ("self_attention.q_layernorm.weight", "self_attention.k_layernorm.weight"):
                merged[p + f"self_attn.{rest.split('.')[1][0]}_norm.weight"] = first  # Qwen3's, replicated
            else:
                raise KeyError(f"{key}: not a tensor of the Qwen2 / Qwen3 / Llama layout this merger knows")
        else:
            raise KeyError(f"{key}: not a tensor of the Qwen2 / Qwen3 / Llama layout this merger knows")
    return merged
