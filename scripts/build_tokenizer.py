"""Rebuild the shipped byte-level ChatML tokenizer into verl/assets/tokenizer (deterministic, offline).

Usage: python scripts/build_tokenizer.py [--out DIR]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from verl.utils.tokenizer import build_byte_tokenizer  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "verl", "assets", "tokenizer")


def main() -> None:
    """Parse ``--out`` and write the tokenizer files there."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: verl/assets/tokenizer)")
    args = parser.parse_args()
    tokenizer = build_byte_tokenizer(args.out)
    print(f"wrote {len(tokenizer)}-token tokenizer to {args.out}")


if __name__ == "__main__":
    main()
