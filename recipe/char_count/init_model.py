"""The tutorial's starting point: a seeded, randomly initialised tiny Qwen2 model with the shipped tokenizer.

python -m recipe.char_count.init_model --out ~/char_count/init
"""

from __future__ import annotations

import argparse

from verl.demo.tiny_model import make_tiny_model_dir

# About 0.1M parameters besides the embeddings: SFT learns the task in a few hundred steps of a minute or two on
# 2 CPU cores (a 1M-parameter model of 4 layers learns it more slowly at this budget).
MODEL = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 256}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="model folder to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(make_tiny_model_dir(args.out, seed=args.seed, max_position_embeddings=128, **MODEL))


if __name__ == "__main__":
    main()
