"""Peak-memory check: chunked log-probs/entropy allocate far less than the naive full-size form.

Each measurement runs in a fresh subprocess and reads the kernel's peak resident set size (VmHWM, reset
through /proc/self/clear_refs just before the call), so every allocation torch makes is counted.
"""

import functools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = textwrap.dedent(
    """
    import json, re, sys
    import torch
    import torch.nn.functional as F
    from verl.utils import torch_functional as verl_F

    torch.set_num_threads(1)
    verl_F._CHUNK_ELEMENTS = 1 << 18  # 1 MB float32 chunks

    def status(key):
        return int(re.search(key + r":\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024

    def run(logits, labels, mode, backward):
        if mode == "naive":
            lp = F.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
            ent = -(F.softmax(logits, -1) * F.log_softmax(logits, -1)).sum(-1)
        else:
            lp = verl_F.logprobs_from_logits(logits, labels)
            ent = verl_F.entropy_from_logits(logits)
        if backward:
            (lp.sum() + ent.sum()).backward()

    results = {}
    for backward in (False, True):
        for mode in ("naive", "chunked"):
            small = torch.randn(8, 64, requires_grad=backward)
            run(small, torch.zeros(8, dtype=torch.long), mode, backward)  # warm up allocator and thread pools
            logits = torch.randn(4096, 2048, requires_grad=backward)  # 32 MiB float32
            labels = torch.randint(0, 2048, (4096,))
            open("/proc/self/clear_refs", "w").write("5")
            before = status("VmRSS")
            run(logits, labels, mode, backward)
            results[f"{mode}_{int(backward)}"] = status("VmHWM") - before
            del logits, labels
    results["logits_bytes"] = 4096 * 2048 * 4
    print(json.dumps(results))
    """
)


@functools.cache
def _measure() -> dict:
    env = {"PYTHONPATH": str(REPO), "MALLOC_MMAP_THRESHOLD_": "65536", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc peak-RSS reset")
@pytest.mark.parametrize("backward", [False, True])
def test_chunked_logprob_entropy_peak_memory(backward):
    m = _measure()
    size, naive, ours = m["logits_bytes"], m[f"naive_{int(backward)}"], m[f"chunked_{int(backward)}"]
    # the naive form materialises at least one full-size copy of the logits
    assert naive >= 0.9 * size
    if backward:
        # one full-size gradient per function (log-prob, entropy); no saved full-size activations
        assert ours < 2.2 * size
        assert ours < 0.5 * naive
    else:
        assert ours < 0.2 * size
