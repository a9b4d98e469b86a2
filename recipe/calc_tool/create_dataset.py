"""The calc_tool task: "37*45" -> "answer: 1665", with a calculator tool. Writes SFT and RL parquet files, seeded.

    python -m recipe.calc_tool.create_dataset --local_dir ~/calc_tool/data

Operands have ``--min_digits``..``--max_digits`` digits. A tiny model cannot multiply two such numbers, but it can
copy the expression into a ``calculator`` call and copy the result back. Every problem appears at most once and the
test problems are held out from both training sets.

Writes to ``--local_dir``:

* ``sft_train.parquet`` / ``sft_test.parquet``: a ``messages`` column (user question, assistant tool call in Hermes
  ``<tool_call>`` format, tool result, assistant answer) and a ``tools`` column (the calculator's schema) for the
  multi-turn SFT trainer. The corpus is deliberately sloppy: a share ``--skip_tool`` (default 0.6) of the
  conversations answer at once without the tool (the true product, which the model cannot compute), and a share
  ``--miscopy`` (default 0.25) of the tool-using ones copy the result back with one digit wrong. A model fitted to
  it prefers to skip the tool, so greedy accuracy starts low while sampled conversations often use the tool:
  room for GRPO to raise it;
* ``train.parquet`` / ``test.parquet``: verl's RL schema (``data_source="calc_tool"``, ``prompt`` as chat
  messages, ``reward_model={"style": "rule", "ground_truth": "1665"}``, ``extra_info`` with ``tools_kwargs``),
  scored by ``recipe/calc_tool/reward_function.py``.
"""

from __future__ import annotations

import argparse
import json
import random

from recipe.calc_tool.calculator import BUSY, SCHEMA
from recipe.char_count.create_dataset import write_splits

DATA_SOURCE = "calc_tool"
TOOL_NAME = SCHEMA["function"]["name"]

__all__ = [
    "DATA_SOURCE",
    "answer_text",
    "busy_calls",
    "make_problems",
    "rl_rows",
    "sft_rows",
    "tool_call_text",
    "write_dataset",
]


def busy_calls(index: int, busy_max: int, seed: int = 0) -> int:
    """How many times the calculator answers ``busy`` to problem ``index``: 0..``busy_max`` with a long tail
    (each extra refusal half as likely as the one before; the last value takes the rest), seeded."""
    if busy_max <= 0:
        return 0
    draw = random.Random(seed * 1_000_003 + index).random()
    k, share = 0, 0.5
    while k < busy_max and draw >= share:
        draw -= share
        share /= 2
        k += 1
    return k


def make_prompt(a: int, b: int) -> str:
    """The user message (short: every character is a token of the byte-level tokenizer)."""
    return f"{a}*{b}"


def answer_text(value: int | str) -> str:
    """The final assistant turn the reward function reads."""
    return f"answer: {value}"


def tool_call_text(expression: str) -> str:
    """An assistant turn that calls the calculator, in the Hermes format the rollout's parser reads."""
    call = {"name": TOOL_NAME, "arguments": {"expression": expression}}
    return f"<tool_call>{json.dumps(call, separators=(',', ':'))}</tool_call>"


def make_problems(n: int, seed: int = 0, min_digits: int = 2, max_digits: int = 2) -> list[tuple[int, int, int]]:
    """``n`` distinct ``(a, b, a*b)`` problems in a seeded order, each operand of min..max_digits digits."""
    if not 1 <= min_digits <= max_digits:
        raise ValueError(f"min_digits={min_digits}, max_digits={max_digits}; expected 1 <= min_digits <= max_digits")
    low, high = 10 ** (min_digits - 1), 10**max_digits - 1
    if n > (high - low + 1) ** 2 // 2:  # drawing near the whole space by rejection would crawl
        raise ValueError(f"n={n} problems asked for, but only {(high - low + 1) ** 2} exist; allow more digits")
    rng = random.Random(seed)
    seen, problems = set(), []
    while len(problems) < n:
        # the digit count first, then the number: 2- and 3-digit operands are equally common
        a, b = (rng.randint(10 ** (d - 1), 10**d - 1) for d in (rng.randint(min_digits, max_digits) for _ in "ab"))
        if (a, b) not in seen:
            seen.add((a, b))
            problems.append((a, b, a * b))
    return problems


def _miscopy(value: int, rng: random.Random) -> int:
    """``value`` with one digit changed (never the leading digit to 0)."""
    digits = list(str(value))
    i = rng.randrange(len(digits))
    choices = [d for d in "0123456789" if d != digits[i] and not (i == 0 and d == "0")]
    digits[i] = rng.choice(choices)
    return int("".join(digits))


def sft_rows(
    problems: list, skip_tool: float = 0.6, miscopy: float = 0.25, seed: int = 0, busy_max: int = 0
) -> list[dict]:
    """Conversation rows; ``kind`` says which are clean (``tool``), skip the tool (``skip``) or miscopy
    (``miscopy``): exactly ``round(skip_tool * n)`` skip, and ``round(miscopy * rest)`` of the rest miscopy. With
    ``busy_max`` > 0 a tool conversation first meets ``busy_calls(i, busy_max)`` busy answers, each followed by the
    same call again."""
    for name, share in (("skip_tool", skip_tool), ("miscopy", miscopy)):
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"{name}={share}; expected a share between 0 and 1")
    rng = random.Random(seed + 1)
    order = list(range(len(problems)))
    rng.shuffle(order)
    n_skip = round(skip_tool * len(problems))
    n_miscopy = round(miscopy * (len(problems) - n_skip))
    kinds = {i: "skip" for i in order[:n_skip]}
    kinds.update({i: "miscopy" for i in order[n_skip : n_skip + n_miscopy]})
    rows = []
    for i, (a, b, product) in enumerate(problems):
        kind = kinds.get(i, "tool")
        expression = make_prompt(a, b)
        messages = [{"role": "user", "content": expression}]
        if kind == "skip":
            messages.append({"role": "assistant", "content": answer_text(product)})
        else:
            final = _miscopy(product, rng) if kind == "miscopy" else product
            for _ in range(busy_calls(i, busy_max, seed)):
                messages += [
                    {"role": "assistant", "content": tool_call_text(expression)},
                    {"role": "tool", "content": BUSY},
                ]
            messages += [
                {"role": "assistant", "content": tool_call_text(expression)},
                {"role": "tool", "content": str(product)},
                {"role": "assistant", "content": answer_text(final)},
            ]
        rows.append({"messages": messages, "tools": [SCHEMA], "kind": kind})
    return rows


def rl_rows(problems: list, split: str, busy_max: int = 0, seed: int = 0) -> list[dict]:
    """Rows in verl's RL schema; the ground truth is the product as a string. With ``busy_max`` > 0 each row's
    calculator answers ``busy`` to its first ``busy_calls(index, busy_max)`` calls (``create_kwargs``)."""
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": make_prompt(a, b)}],
            "ability": "arithmetic",
            "reward_model": {"style": "rule", "ground_truth": str(product)},
            "extra_info": {
                "split": split,
                "index": i,
                "a": a,
                "b": b,
                # the rollout offers a row the tools named here (the calculator ignores the ground truth)
                "tools_kwargs": {
                    TOOL_NAME: {
                        "create_kwargs": {"ground_truth": str(product)}
                        | ({"busy_calls": busy_calls(i, busy_max, seed + 7)} if busy_max else {})
                    }
                },
            },
        }
        for i, (a, b, product) in enumerate(problems)
    ]


def write_dataset(
    local_dir: str,
    seed: int = 0,
    num_train: int = 3800,
    num_test: int = 200,
    num_rl_train: int = 1000,
    skip_tool: float = 0.6,
    miscopy: float = 0.25,
    busy_max: int = 0,
    sft_busy_max: int | None = None,
    **task,
) -> dict[str, str]:
    """Write the four parquet files into ``local_dir``; returns ``{name: path}``.

    The first ``num_test`` problems are the test set; SFT trains on the next ``num_train``, RL on the first
    ``num_rl_train`` of those. ``task`` goes to :func:`make_problems` (min_digits, max_digits). ``busy_max``: the
    most busy answers an RL row meets (0: none); ``sft_busy_max`` the same for SFT conversations (default
    ``busy_max``; fewer keeps them short, and the model is to generalise "busy: call again").
    """
    problems = make_problems(num_test + num_train, seed, **task)
    sft_busy = busy_max if sft_busy_max is None else sft_busy_max
    return write_splits(
        local_dir,
        problems,
        num_test,
        num_rl_train,
        lambda rows: sft_rows(rows, skip_tool, miscopy, seed, sft_busy),
        lambda rows, split: rl_rows(rows, split, busy_max, seed),
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_dir", default="~/data/calc_tool")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num_train", type=int, default=3800, help="SFT conversations")
    parser.add_argument("--num_test", type=int, default=200, help="held-out problems (SFT and RL test sets)")
    parser.add_argument("--num_rl_train", type=int, default=1000, help="RL prompts (a subset of the SFT problems)")
    parser.add_argument("--skip_tool", type=float, default=0.6, help="share of SFT answers given without the tool")
    parser.add_argument("--miscopy", type=float, default=0.25, help="share of tool answers copied with a wrong digit")
    parser.add_argument("--min_digits", type=int, default=2)
    parser.add_argument("--max_digits", type=int, default=2)
    parser.add_argument("--busy_max", type=int, default=0, help="most 'busy' answers before the result (RL rows)")
    parser.add_argument("--sft_busy_max", type=int, default=None, help="the same for SFT (default: --busy_max)")
    options = vars(parser.parse_args(argv))
    for name, path in write_dataset(options.pop("local_dir"), **options).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
