"""Sphinx configuration: MyST Markdown pages, API reference from docstrings, config reference from the YAMLs.

Build (warnings are errors):  sphinx-build -W --keep-going -b html docs docs/_build/html
"""

import os
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(DOCS))  # the repository, so autodoc documents this tree
sys.path.insert(0, os.path.join(DOCS, "_ext"))

project = "verl (CPU and GPU)"
author = "verl-compatible project contributors"
with open(os.path.join(os.path.dirname(DOCS), "verl", "version", "version")) as f:
    release = f.read().strip()

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "config_reference",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "README.md"]
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# API reference: every public member (not only a module's __all__) in source order, type hints in the description
# instead of long signatures. Optional engines are mocked so the reference builds the same with or without them.
add_module_names = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
autodoc_mock_imports = ["vllm", "sglang", "flash_attn", "liger_kernel", "megatron"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"verl {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
