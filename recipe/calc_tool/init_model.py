"""The recipe's starting point: a seeded, randomly initialised tiny Qwen2 model with the shipped tokenizer and a
compact tool-calling chat template.

python -m recipe.calc_tool.init_model --out ~/calc_tool/init

The shipped template renders a ~600-token tool preamble (every schema as JSON plus instructions); a byte-level
model of this size would spend most of its context and compute on it. This template names the tools in one short
system line and keeps the Hermes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` call format (what
the rollout's ``hermes`` parser reads). It is prefix-stable: rendering ``messages[:k]`` gives a prefix of rendering
``messages[:k+1]``, which both the multi-turn rollout and the multi-turn SFT dataset need.
"""

from __future__ import annotations

import argparse
import os

from verl.demo.tiny_model import make_tiny_model_dir

# About 0.1M parameters besides the embeddings: enough to copy a 5-character expression into a call and the result
# back within a few minutes of SFT on 2 CPU cores.
MODEL = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 256}
MAX_POSITIONS = 256

# Assistant turns are rendered verbatim (the rollout stores the model's text, tool-call markup included); an
# assistant message given with OpenAI ``tool_calls`` instead is rendered as the same Hermes blocks.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\ntools: "
    "{% for tool in tools %}{{ (tool.function or tool).name }}{% if not loop.last %}, {% endif %}{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'assistant' %}<|im_start|>assistant\n{{ message.content or '' }}"
    "{% for call in message.tool_calls or [] %}{% set f = call.function or call %}"
    '<tool_call>{"name":"{{ f.name }}","arguments":'
    "{% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}}</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_model_dir(out: str, seed: int = 0) -> str:
    """Write the random model, the tokenizer and the compact chat template into ``out``; returns ``out``."""
    from transformers import AutoTokenizer

    from verl.utils.tokenizer import make_tokenizer_config_portable

    make_tiny_model_dir(out, seed=seed, max_position_embeddings=MAX_POSITIONS, **MODEL)
    tokenizer = AutoTokenizer.from_pretrained(out)
    tokenizer.chat_template = CHAT_TEMPLATE
    # a stale chat_template.jinja next to the config would win over the one saved in tokenizer_config.json
    stale = os.path.join(out, "chat_template.jinja")
    if os.path.exists(stale):
        os.remove(stale)
    tokenizer.save_pretrained(out)
    make_tokenizer_config_portable(os.path.join(out, "tokenizer_config.json"))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="model folder to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(make_model_dir(args.out, seed=args.seed))


if __name__ == "__main__":
    main()
