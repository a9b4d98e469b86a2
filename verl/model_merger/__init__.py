"""Turn a training checkpoint (``global_step_N/actor``) into a Hugging Face model: ``python -m verl.model_merger``."""

from verl.model_merger.base_model_merger import (
    BaseModelMerger,
    ModelMergerConfig,
    generate_config_from_args,
    parse_args,
)

__all__ = ["BaseModelMerger", "ModelMergerConfig", "generate_config_from_args", "main", "parse_args"]


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv``, build the backend's merger and run ``merge`` or ``test``."""
    config = generate_config_from_args(parse_args(argv))
    if config.backend == "fsdp":
        from verl.model_merger.fsdp_model_merger import FSDPModelMerger

        merger = FSDPModelMerger(config)
    else:
        from verl.model_merger.megatron_model_merger import MegatronModelMerger

        merger = MegatronModelMerger(config)
    try:
        merger.merge_and_save()
    finally:
        merger.cleanup()
