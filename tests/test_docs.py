"""The examples in the docstrings and in the README run and print what they say."""
import doctest
import importlib
import pkgutil
import re
from pathlib import Path

import pytest
import torch

import torchfair

MODULES = sorted(m.name for m in pkgutil.walk_packages(torchfair.__path__, "torchfair."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    torch.manual_seed(0)
    res = doctest.testmod(mod, extraglobs={"torch": torch}, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0


def test_readme_python_blocks():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
