"""The engine registry: fsdp and fsdp2 map to the FSDP engine, megatron to the Megatron engine (where megatron-core is
installed); a strategy without an engine is refused by name."""

import pytest

from verl.workers.engine import TrainingEngine, get_engine_cls, register_engine
from verl.workers.engine.fsdp import FSDPEngine


def test_fsdp_strategies_map_to_the_fsdp_engine():
    assert get_engine_cls("fsdp") is FSDPEngine and get_engine_cls("fsdp2") is FSDPEngine


def test_megatron_maps_to_the_megatron_engine():
    pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")
    from verl.workers.engine.megatron.engine import MegatronEngine

    assert get_engine_cls("megatron") is MegatronEngine


def test_an_unknown_strategy_names_the_key_and_the_known_strategies():
    message = r"critic\.strategy='deepspeed' has no training engine; known strategies: fsdp, fsdp2"
    with pytest.raises(ValueError, match=message):
        get_engine_cls("deepspeed", "critic.strategy")


def test_a_strategy_cannot_change_engine_and_only_engines_register():
    class Other(FSDPEngine):
        pass

    with pytest.raises(ValueError, match="already registered"):
        register_engine("fsdp")(Other)
    with pytest.raises(TypeError, match=TrainingEngine.__name__):
        register_engine("plain")(object)
