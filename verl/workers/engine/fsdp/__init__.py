"""The FSDP/FSDP2 + HF transformers training engine."""
