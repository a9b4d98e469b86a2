"""The documentation site: the config reference covers every key, the FAQ quotes current errors, the site builds.

The build runs the README's command (``sphinx-build -W --keep-going``) when the docs extra is installed (the test
extra pulls it in, so CI builds the site) and skips with a reason otherwise.
"""

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _load_reference_module():
    spec = importlib.util.spec_from_file_location("config_reference", DOCS / "_ext" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


ref = _load_reference_module()


@pytest.mark.parametrize("name", [c[0] for c in ref.CONFIGS])
def test_config_reference_has_every_key_with_a_meaning(name):
    """Each leaf key OmegaConf loads from the YAML is a row of the generated page, with its comment as meaning."""
    tree = OmegaConf.to_container(OmegaConf.load(ref.config_file(name)), resolve=False)
    tree.pop("defaults", None)
    leaves = ref.leaf_keys(tree)
    entries = {e.key: e for e in ref.config_entries(name)}
    title, reader = next((t, r) for n, t, r in ref.CONFIGS if n == name)
    page = ref.render_markdown(name, title, reader, list(entries.values()))
    missing = [k for k in leaves if k not in entries or not entries[k].meaning]
    assert missing == [], f"{name}.yaml keys without a comment above them: {missing}"
    rows = {m.group(1) for m in re.finditer(r"^\* - `([^`]+)`$", page, flags=re.M)}
    assert set(leaves) <= rows, sorted(set(leaves) - rows)
    sections = [e.key for e in entries.values() if e.is_section and not e.meaning]
    assert sections == [], f"{name}.yaml sections without a comment: {sections}"


def test_reference_rows_show_the_yaml_default_and_comment(tmp_path):
    """A hand-made YAML: defaults as written, comments joined, sections nested, a mismatch refused."""
    (tmp_path / "demo.yaml").write_text(
        "# The a section.\na:\n  # Learning\n  # rate.\n  lr: 1e-4\n\n  # Follows lr.\n  other: ${a.lr}\n"
        "  # Nested.\n  inner:\n    # A list.\n    xs: [1, 2]\n# Top-level flag.\nflag: false\n"
    )
    entries = {e.key: e for e in ref.config_entries("demo", config_dir=tmp_path)}
    assert entries["a.lr"].default == "1e-4" and entries["a.lr"].meaning == "Learning rate."
    assert entries["a.other"].default == "${a.lr}" and entries["a.inner"].is_section
    assert entries["a.inner.xs"].default == "[1, 2]" and entries["flag"].meaning == "Top-level flag."
    page = ref.render_markdown("demo", "Demo", "nobody", list(entries.values()))
    assert "* - `a.inner.xs`\n  - `[1, 2]`\n  - A list." in page and "## `a`" in page and "## Top-level keys" in page
    (tmp_path / "bad.yaml").write_text("a: {b: 1}\n")  # a flow mapping the line scan cannot see into
    with pytest.raises(ValueError, match="disagree"):
        ref.config_entries("bad", config_dir=tmp_path)


def _faq_cases():
    """(overrides, quoted error) for every ``$ python -m verl.trainer.main_ppo ...`` block of docs/faq.md."""
    from verl.trainer.config import ConfigError

    traceback_line = f"{ConfigError.__module__}.{ConfigError.__qualname__}: "  # how Python prints the error
    text = (DOCS / "faq.md").read_text()
    cases = []
    for block in re.findall(r"```text\n(.*?)```", text, flags=re.S):
        lines = block.strip().replace("\\\n", " ").splitlines()  # a command continued with backslashes is one line
        if not lines[0].startswith("$ python -m verl.trainer.main_ppo"):
            continue
        overrides = lines[0].split("main_ppo", 1)[1].split()
        start = next(i for i, ln in enumerate(lines) if ln.startswith(traceback_line))
        error = "\n".join(lines[start:]).split(": ", 1)[1]  # a multi-problem message continues on later lines
        cases.append((overrides, error))
    return cases


def test_faq_quotes_the_errors_the_config_check_raises():
    """Each FAQ entry's command line fails in ``prepare_config`` with exactly the message the FAQ quotes."""
    from hydra import compose, initialize_config_dir

    from verl.demo.default_run import apply_builtin_demo, command_line_keys
    from verl.trainer.config import ConfigError
    from verl.trainer.main_ppo import prepare_config

    cases = _faq_cases()
    assert len(cases) >= 8
    for overrides, quoted in cases:
        overrides = [o.strip("'\"") for o in overrides]
        with initialize_config_dir(config_dir=str(ref.CONFIG_DIR), version_base=None):
            config = compose(config_name="ppo_trainer", overrides=overrides)
        apply_builtin_demo(config, command_line_keys(overrides))  # what main_ppo does with this command line
        with pytest.raises(ConfigError) as info:
            prepare_config(config)
        assert str(info.value) == quoted, (overrides, str(info.value))


DOCS_DEPS = ("sphinx", "myst_parser", "furo")


@pytest.mark.slow
@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in DOCS_DEPS),
    reason="the docs extra (sphinx, myst-parser, furo) is not installed: pip install -e '.[docs]'",
)
def test_docs_site_builds_with_warnings_as_errors(tmp_path):
    """The README's build command, into a temporary folder; the generated reference and the API pages are there."""
    out = tmp_path / "html"
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    reference = (out / "generated" / "config_ppo_trainer.html").read_text()
    assert "actor_rollout_ref.actor.clip_ratio" in reference and "PPO clip range epsilon." in reference
    api = (out / "api" / "core_algos.html").read_text()
    assert "compute_grpo_outcome_advantage" in api and "register_adv_est" in api
    assert (out / "recipes.html").exists() and (out / "faq.html").exists()
