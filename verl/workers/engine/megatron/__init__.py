"""The megatron-core training engine (``strategy=megatron``): HF decoders as tensor- and pipeline-parallel
``GPTModel``s with the local layer spec; run on CPU with gloo so far (no accelerator has run it yet)."""
