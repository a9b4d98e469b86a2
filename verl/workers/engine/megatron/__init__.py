"""The megatron-core training engine (``strategy=megatron``): HF decoders as tensor- and pipeline-parallel
``GPTModel``s with the local layer spec, on CPU (gloo) and GPU."""
