"""Grade-school word problems with numeric answers (GSM8K-style), generated and seeded, as RL parquet files.

GSM8K itself cannot be downloaded here, and a benchmark on a pretrained instruct model needs prompts of the same
kind: a short story with two to four quantities, one to three operations, and a whole-number answer, so that the
model writes a few sentences of reasoning of varying length and stops at its end-of-turn token. ``write_dataset``
writes ``train.parquet`` and ``test.parquet`` in verl's RL schema (``data_source="verl/word_problems"``, ``prompt``
as chat messages, ``reward_model={"style": "rule", "ground_truth": "17"}``), scored by
``verl.utils.reward_score.word_problems`` (the response's last number). The same arguments always give the same
rows; no question appears in both splits.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from verl.utils.reward_score.word_problems import DATA_SOURCE

ABILITY = "math"
INSTRUCTION = "Solve the problem step by step, then give the final answer as a single number."

__all__ = ["DATA_SOURCE", "TEMPLATES", "Template", "make_problems", "rl_rows", "write_dataset"]

_NAMES = ("Ava", "Ben", "Carla", "Diego", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kira", "Liam")
_ITEMS = ("apples", "marbles", "stickers", "cookies", "pencils", "cards", "shells", "books")


@dataclass(frozen=True)
class Template:
    """One kind of problem: ``text`` with ``{name}``, ``{item}`` and the numbers' fields; ``ranges`` draws each
    number (inclusive bounds); ``answer`` computes the result from the numbers; ``valid`` rejects a draw (e.g. one
    that would leave a negative count or an uneven share)."""

    text: str
    ranges: dict[str, tuple[int, int]]
    answer: Callable[[dict[str, int]], int]
    valid: Callable[[dict[str, int]], bool] = lambda n: True


TEMPLATES = (
    Template(
        "{name} has {a} {item}. {name} buys {b} more and then gives {c} to a friend. "
        "How many {item} does {name} have now?",
        {"a": (5, 60), "b": (2, 40), "c": (1, 30)},
        lambda n: n["a"] + n["b"] - n["c"],
        lambda n: n["c"] <= n["a"] + n["b"],
    ),
    Template(
        "A baker fills {a} trays with {b} {item} on each tray and sells {c} of them. How many {item} are left?",
        {"a": (2, 12), "b": (3, 12), "c": (1, 50)},
        lambda n: n["a"] * n["b"] - n["c"],
        lambda n: n["c"] <= n["a"] * n["b"],
    ),
    Template(
        "{name} earns {a} dollars per hour and works {b} hours each week. How many dollars does {name} earn in "
        "{c} weeks?",
        {"a": (8, 30), "b": (3, 20), "c": (2, 6)},
        lambda n: n["a"] * n["b"] * n["c"],
    ),
    Template(
        "{name} shares {a} {item} equally among {b} friends and keeps the {c} left over. How many {item} does each "
        "friend get?",
        {"a": (10, 120), "b": (2, 9), "c": (1, 8)},
        lambda n: (n["a"] - n["c"]) // n["b"],
        lambda n: n["c"] < n["b"] and n["a"] > n["c"] and (n["a"] - n["c"]) % n["b"] == 0,
    ),
    Template(
        "A train travels at {a} miles per hour for {b} hours, then at {c} miles per hour for {d} hours. How many "
        "miles does it travel in total?",
        {"a": (20, 80), "b": (2, 5), "c": (20, 80), "d": (2, 5)},
        lambda n: n["a"] * n["b"] + n["c"] * n["d"],
    ),
    Template(
        "A book has {a} pages. {name} reads {b} pages on Monday and twice as many on Tuesday. How many pages are "
        "left to read?",
        {"a": (60, 400), "b": (5, 60)},
        lambda n: n["a"] - 3 * n["b"],
        lambda n: 3 * n["b"] < n["a"],
    ),
    Template(
        "{name} buys {a} packs of {item} with {b} in each pack and already had {c}. How many {item} does {name} "
        "have in all?",
        {"a": (2, 15), "b": (4, 24), "c": (0, 40)},
        lambda n: n["a"] * n["b"] + n["c"],
    ),
    Template(
        "A garden has {a} rows of {b} plants. {c} plants die and {name} plants {d} new ones. How many plants are in "
        "the garden now?",
        {"a": (3, 20), "b": (4, 20), "c": (1, 30), "d": (1, 30)},
        lambda n: n["a"] * n["b"] - n["c"] + n["d"],
        lambda n: n["c"] <= n["a"] * n["b"],
    ),
)


def _draw(rng: random.Random, template: Template) -> tuple[str, int]:
    while True:
        numbers = {key: rng.randint(low, high) for key, (low, high) in template.ranges.items()}
        if template.valid(numbers):
            break
    text = template.text.format(name=rng.choice(_NAMES), item=rng.choice(_ITEMS), **numbers)
    return text, template.answer(numbers)


def make_problems(count: int, seed: int = 0) -> list[tuple[str, int]]:
    """``count`` distinct ``(question, answer)`` pairs, templates taken in turn, numbers and names drawn from
    ``seed``."""
    rng, seen, problems = random.Random(seed), set(), []
    attempts = 0
    while len(problems) < count:
        attempts += 1
        if attempts > 100 * count:
            raise ValueError(f"count={count}: the templates cannot give that many distinct problems")
        question, answer = _draw(rng, TEMPLATES[len(problems) % len(TEMPLATES)])
        if question not in seen:
            seen.add(question)
            problems.append((question, answer))
    return problems


def rl_rows(problems: list[tuple[str, int]], split: str) -> list[dict]:
    """Rows in verl's RL schema; the prompt is the question and :data:`INSTRUCTION` in one user message."""
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": str(answer)},
            "extra_info": {"split": split, "index": i, "question": question, "answer": str(answer)},
        }
        for i, (question, answer) in enumerate(problems)
    ]


def write_dataset(local_dir: str, seed: int = 0, num_train: int = 1000, num_test: int = 100) -> dict[str, str]:
    """Write ``train.parquet`` and ``test.parquet`` into ``local_dir``; returns ``{split: path}``."""
    if num_train < 1 or num_test < 1:
        raise ValueError(f"num_train={num_train}, num_test={num_test}; expected both >= 1")
    problems = make_problems(num_train + num_test, seed)
    local_dir = os.path.expanduser(local_dir)
    os.makedirs(local_dir, exist_ok=True)
    paths = {}
    for split, chunk in (("train", problems[num_test:]), ("test", problems[:num_test])):
        paths[split] = os.path.join(local_dir, f"{split}.parquet")
        pd.DataFrame(rl_rows(chunk, split)).to_parquet(paths[split], index=False)
    return paths
