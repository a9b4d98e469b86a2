"""Build the built-in verifiable task: two-number addition ("37+45=" -> "82"), RL and SFT parquet files.

    python examples/data_preprocess/arithmetic.py --local_dir ~/data/arithmetic

Writes ``train.parquet`` / ``test.parquet`` (verl's RL schema, data source ``verl/arithmetic``) and the noisy SFT
corpus ``sft_train.parquet`` / ``sft_test.parquet`` to ``--local_dir``; the rows are described in
``verl.demo.arithmetic_task``, which builds them. The same arguments always give the same rows.
"""

from __future__ import annotations

import argparse
import os

from verl.demo.arithmetic_task import write_dataset


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_dir", default="~/data/arithmetic")
    parser.add_argument("--hdfs_dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_operand", type=int, default=99)
    parser.add_argument("--num_test", type=int, default=200)
    parser.add_argument("--num_rl_train", type=int, default=2000)
    parser.add_argument("--sft_noise", type=float, default=0.6, help="share of SFT answers that are off by one")
    args = parser.parse_args(argv)
    paths = write_dataset(args.local_dir, args.seed, args.max_operand, args.num_test, args.num_rl_train, args.sft_noise)
    if args.hdfs_dir:
        from verl.utils.hdfs_io import copy, makedirs

        makedirs(args.hdfs_dir)
        copy(src=os.path.expanduser(args.local_dir), dst=args.hdfs_dir)
    for name, path in paths.items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
