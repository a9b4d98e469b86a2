"""Names of floating-point precisions as they appear in configs, and their torch dtypes."""

from __future__ import annotations

import torch

__all__ = ["PrecisionType"]

_HALF = (16, "16", "fp16", "float16")
_FLOAT = (32, "32", "fp32", "float32")
_BFLOAT = ("bf16", "bfloat16")


class PrecisionType:
    """Convert between config precision names (16, "fp32", "bf16", ...) and torch dtypes."""

    HALF = "16"
    FLOAT = "32"
    FULL = "64"
    BFLOAT = "bf16"
    MIXED = "mixed"

    @staticmethod
    def supported_type(precision: str | int) -> bool:
        """True when `precision` names one of the supported precisions."""
        return precision in _HALF + _FLOAT + _BFLOAT or precision in (64, "64", PrecisionType.MIXED)

    @staticmethod
    def supported_types() -> list[str]:
        """The canonical precision names."""
        return [PrecisionType.HALF, PrecisionType.FLOAT, PrecisionType.FULL, PrecisionType.BFLOAT, PrecisionType.MIXED]

    @staticmethod
    def is_fp16(precision) -> bool:
        """True for 16, "16", "fp16", "float16"."""
        return precision in _HALF

    @staticmethod
    def is_fp32(precision) -> bool:
        """True for 32, "32", "fp32", "float32"."""
        return precision in _FLOAT

    @staticmethod
    def is_bf16(precision) -> bool:
        """True for "bf16", "bfloat16"."""
        return precision in _BFLOAT

    @staticmethod
    def to_dtype(precision) -> torch.dtype:
        """Map a precision name (or a torch.dtype, returned as is) to a torch dtype."""
        if isinstance(precision, torch.dtype):
            return precision
        if precision in _HALF:
            return torch.float16
        if precision in _FLOAT:
            return torch.float32
        if precision in _BFLOAT:
            return torch.bfloat16
        raise RuntimeError(f"unexpected precision: {precision!r}; expected one of fp16/16, fp32/32, bf16/bfloat16")

    @staticmethod
    def to_str(precision: torch.dtype) -> str:
        """Map a torch dtype to its short name: fp16, fp32 or bf16."""
        names = {torch.float16: "fp16", torch.float32: "fp32", torch.bfloat16: "bf16"}
        if precision not in names:
            raise RuntimeError(f"unexpected dtype: {precision}; expected float16, float32 or bfloat16")
        return names[precision]
