"""GSM8K for multi-turn rollouts with the GSM8K interaction (``verl.interactions.gsm8k_interaction``).

    python examples/data_preprocess/gsm8k_multiturn_w_interaction.py
    python examples/data_preprocess/gsm8k_multiturn_w_interaction.py --local_dataset_path /data/gsm8k   # offline

Rows are ``gsm8k.py``'s plus a system prompt asking the model to reconsider when told it is wrong, and the
``interaction_kwargs`` (``{"name": "gsm8k", "query", "ground_truth"}``) that start each conversation's state.
Same sources and ``--local_dataset_path`` layouts as ``gsm8k.py``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # sibling helpers when run as a script

from gsm8k_multiturn_w_tool import make_multiturn_map_fn, run  # noqa: E402

SYSTEM_PROMPT = (
    "You are a careful math solver. Solve the question step by step. If you are told your answer is wrong, "
    "look again at your reasoning and correct it. Write your final answer as `#### <answer>`."
)

make_map_fn = make_multiturn_map_fn(SYSTEM_PROMPT, with_tools=False)


def main(argv=None) -> None:
    """Write ``train.parquet`` / ``test.parquet`` of GSM8K interaction rows into ``--local_dir``."""
    run(make_map_fn, "~/data/gsm8k_verl_sgl_multi_turn_w_interaction", argv)


if __name__ == "__main__":
    main()
