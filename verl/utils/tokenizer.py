"""Tokenizer and processor loading, pad-token repair, and the byte-level tokenizer the project ships."""

from __future__ import annotations

import json
import logging
import os
import warnings

logger = logging.getLogger(__name__)

__all__ = [
    "hf_tokenizer",
    "hf_processor",
    "set_pad_token_id",
    "build_byte_tokenizer",
    "SPECIAL_TOKENS",
    "CHAT_TEMPLATE",
]

# The shipped tokenizer's special tokens, in id order after the 256 byte tokens.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# ChatML, as Qwen2 renders it, minus the default system prompt (it would double a tiny model's prompt length).
# Tool calls and tool results follow Qwen2.5's tags so multi-turn tool data renders the same way.
CHAT_TEMPLATE = (
    "{% if tools %}"
    "<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    # HF renders with trim_blocks, which eats a newline right after a block tag, hence the {{ '\\n' }}.
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call><|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{% if not (tools and loop.first) %}<|im_start|>system\n{{ message['content'] }}<|im_end|>\n{% endif %}"
    "{% elif message['role'] == 'assistant' %}"
    "<|im_start|>assistant\n{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% if message.get('tool_calls') %}"
    "{% for tool_call in message['tool_calls'] %}"
    "{% set call = tool_call['function'] if tool_call.get('function') else tool_call %}"
    "{% if message['content'] or not loop.first %}{{ '\\n' }}{% endif %}"
    '<tool_call>\n{"name": "{{ call["name"] }}", "arguments": '
    "{% if call['arguments'] is string %}{{ call['arguments'] }}{% else %}{{ call['arguments'] | tojson }}{% endif %}"
    "}\n</tool_call>"
    "{% endfor %}"
    "{% endif %}"
    "<|im_end|>\n"
    "{% elif message['role'] == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def set_pad_token_id(tokenizer) -> None:
    """Set a missing pad token (id or string) to the eos token, with a warning."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token_id = tokenizer.eos_token_id
        warnings.warn(f"tokenizer.pad_token_id is None. Now set to {tokenizer.eos_token_id}", stacklevel=2)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
        warnings.warn(f"tokenizer.pad_token is None. Now set to {tokenizer.eos_token}", stacklevel=2)


def hf_tokenizer(name_or_path: str, correct_pad_token: bool = True, correct_gemma2: bool = True, **kwargs):
    """Load a tokenizer with ``AutoTokenizer``; fill a missing pad token from eos and fix gemma-2-2b-it's eos."""
    from transformers import AutoTokenizer

    if correct_gemma2 and isinstance(name_or_path, str) and "gemma-2-2b-it" in name_or_path:
        # gemma-2-2b-it ends turns with <end_of_turn>, but its config names <eos>; generation would never stop.
        warnings.warn("Found gemma-2-2b-it tokenizer. Set eos_token and eos_token_id to <end_of_turn> and 107.")
        kwargs["eos_token"] = "<end_of_turn>"
        kwargs["eos_token_id"] = 107
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
    if correct_pad_token:
        set_pad_token_id(tokenizer)
    return tokenizer


def hf_processor(name_or_path: str, **kwargs):
    """Load a multimodal processor with ``AutoProcessor``; None when there is none (text-only models).

    A Qwen2-VL / Qwen2.5-VL folder on a machine without torchvision gets a
    :class:`verl.utils.vlm_processor.QwenVLProcessor` (image processor + tokenizer) instead.
    """
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(name_or_path, **kwargs)
    except Exception as e:  # a text-only model dir has no processor config; that is the normal case
        logger.debug("no processor for %s: %s", name_or_path, e)
        # Qwen-VL processors need torchvision; without it, build one from the image processor and tokenizer
        from verl.utils.vlm_processor import load_qwen_vl_processor

        return load_qwen_vl_processor(name_or_path, **kwargs)
    # AutoProcessor falls back to the plain tokenizer for text-only models; that is not a processor.
    if processor is not None and "Processor" not in processor.__class__.__name__:
        return None
    return processor


def _byte_to_unicode() -> dict[int, str]:
    """Map every byte to a printable unicode character (printable latin-1 bytes map to themselves)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    mapping = {b: chr(b) for b in keep}
    shift = 0
    for b in range(256):
        if b not in mapping:
            # the remaining (control/space) bytes get characters past 255, in byte order, so the map is fixed
            mapping[b] = chr(256 + shift)
            shift += 1
    return mapping


def build_byte_tokenizer(out_dir: str | None = None):
    """Build the shipped byte-level tokenizer (256 byte tokens + 3 specials, ChatML template); save it if asked.

    Deterministic: ids 0..255 are the bytes in order, then ``<|endoftext|>`` (256, pad and eos),
    ``<|im_start|>`` (257), ``<|im_end|>`` (258). No merges, so any text round-trips and no file is downloaded.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: b for b, ch in _byte_to_unicode().items()}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], ignore_merges=False))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        tokenizer.save_pretrained(out_dir)
        make_tokenizer_config_portable(os.path.join(out_dir, "tokenizer_config.json"))
    return tokenizer


def make_tokenizer_config_portable(config_path: str) -> None:
    """Rewrite tokenizer_config.json so transformers 4.x loads it too (v5 reads the same keys it wrote)."""
    with open(config_path) as f:
        config = json.load(f)
    # transformers 5 writes its own backend class name and `extra_special_tokens`; 4.x knows neither.
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["additional_special_tokens"] = list(SPECIAL_TOKENS[1:])
    config["chat_template"] = CHAT_TEMPLATE
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
