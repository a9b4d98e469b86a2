"""Build the example's tiny generative judge: a seeded, randomly initialised Qwen2 causal LM with the shipped
tokenizer (its grades are noise; the example shows the plumbing, not a good judge). Usage: python make_judge.py DIR"""

import sys

from verl.demo.tiny_model import make_tiny_model_dir

if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/verl_tiny_judge"
    print(make_tiny_model_dir(path, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, seed=7))
