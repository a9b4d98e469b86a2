"""load_pretrained: a model's tokenizer and config.json read from folders of their own (model.tokenizer_path,
model.hf_config_path), as the actor, rollout and critic workers load them."""

import json

from transformers import AutoTokenizer

from verl.demo.tiny_model import make_tiny_model_dir
from verl.workers.engine.pretrained import load_pretrained


def test_tokenizer_and_config_from_folders_of_their_own(tmp_path):
    model = make_tiny_model_dir(str(tmp_path / "model"), num_layers=1)
    tokenizer_dir, config_dir = tmp_path / "tokenizer", tmp_path / "config"
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.chat_template = template = "{{ 'from the tokenizer folder' }}"
    tokenizer.save_pretrained(tokenizer_dir)
    config_dir.mkdir()
    with open(f"{model}/config.json") as f:
        config = json.load(f)
    config["max_position_embeddings"] = 4096
    with open(config_dir / "config.json", "w") as f:
        json.dump(config, f)

    plain = load_pretrained(model)
    assert plain.tokenizer_path is None and plain.hf_config_path is None
    assert plain.hf_config.max_position_embeddings == 2048 and plain.tokenizer.chat_template != template

    files = load_pretrained(model, tokenizer_path=str(tokenizer_dir), hf_config_path=str(config_dir))
    assert files.local_path == model  # the weights stay where they are
    assert files.tokenizer.chat_template == template
    assert files.hf_config.max_position_embeddings == 4096
    assert (files.tokenizer_path, files.hf_config_path) == (str(tokenizer_dir), str(config_dir))
