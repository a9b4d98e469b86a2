"""One bf16 update through verl's CPU attention form and the same update through sdpa (actor and critic tests)."""

import contextlib

import torch

import verl.workers.engine.fsdp.cpu_attention as cpu_attention_module


def bf16_update_through_both_forms(monkeypatch, build_model, build_engine, run_update) -> tuple[int, float]:
    """``build_model()`` -> a fresh fp32 model; ``build_engine(model)`` -> its actor or critic (SGD, lr 1);
    ``run_update(engine)`` runs one update. The model runs in bf16 with gradient checkpointing.

    Returns how many attention calls took the plain form in the first update, and the norm of the difference of the
    two updates' weight steps relative to the sdpa step's norm."""
    taken = []
    plain = cpu_attention_module.math_attention
    monkeypatch.setattr(cpu_attention_module, "math_attention", lambda *a, **k: taken.append(1) or plain(*a, **k))
    base = build_model().to(torch.bfloat16).state_dict()
    steps = []
    for through_sdpa in (False, True):
        model = build_model().to(torch.bfloat16)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        engine = build_engine(model)
        if through_sdpa:
            calls = len(taken)
            monkeypatch.setattr(engine.engine, "_training_attention", contextlib.nullcontext)
        run_update(engine)
        assert model.config._attn_implementation == "sdpa"  # switched back after the update
        steps.append(torch.cat([(v.float() - base[k].float()).flatten() for k, v in model.state_dict().items()]))
    assert steps[1].norm() > 0
    return calls, float((steps[0] - steps[1]).norm() / steps[1].norm())
