"""torchfair._extras: which extra a missing module belongs to, and the one line that says so.

The installed-or-not answer is faked by replacing ``importlib.util.find_spec`` (what the module asks), so these
tests run in the full test environment; tests/test_packaging.py checks the same lines with the modules really
unimportable, in a subprocess."""
import importlib.util

import pytest

from torchfair import _extras


@pytest.fixture
def without(monkeypatch):
    """``without("pandas", ...)``: those top-level modules look uninstalled to torchfair._extras."""
    real = importlib.util.find_spec

    def install(*absent):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in absent else real(name, *a))
    return install


@pytest.mark.parametrize("fn", [_extras.missing_modules, lambda e: _extras.extra_message("x", e),
                                lambda e: _extras.require("x", e)], ids=["missing_modules", "extra_message", "require"])
def test_unknown_extra_is_a_value_error_naming_it(fn):
    with pytest.raises(ValueError, match="`extra`.*'trian'"):
        fn("trian")


def test_require_names_the_extra_and_the_missing_module(without):
    _extras.require("torchfair.training", "train")  # the test environment has every extra but ray
    without("pandas")
    assert _extras.missing_modules("parquet") == ("pandas",)
    assert _extras.missing_modules("train") == ("pandas",)
    with pytest.raises(ImportError) as e:
        _extras.require("torchfair.data.movielens", "train", ("pandas",))
    assert isinstance(e.value, _extras.MissingExtraError) and e.value.name == "pandas"
    assert str(e.value) == ("torchfair.data.movielens needs the [train] extra (pandas not installed): "
                            "pip install 'torchfair[train]'")
    _extras.require("torchfair.training", "train", ("pytorch_lightning",))  # only the modules named are checked


def test_a_module_whose_lookup_fails_counts_as_missing(monkeypatch):
    def broken(name, *a):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    monkeypatch.setattr(importlib.util, "find_spec", broken)
    assert _extras.missing_modules("cli") == ("jsonargparse", "yaml")


def test_command_error_is_one_line_for_the_commands_extra(without):
    assert _extras.command_error("metrics") is None and _extras.command_error("no-such-command") is None
    without("jsonargparse")
    assert _extras.command_error("metrics") == ("torchfair metrics: error: torchfair metrics needs the [cli] extra "
                                                "(jsonargparse not installed): pip install 'torchfair[cli]'")
    assert "[train]" in _extras.command_error("fit") and "[sweep]" in _extras.command_error("sweep-report")
    without("optuna")
    assert _extras.command_error("metrics") is None and _extras.command_error("evaluate") is None
    assert _extras.command_error("sweep").endswith("(optuna not installed): pip install 'torchfair[sweep]'")


def test_every_command_names_an_extra():
    from torchfair.cli import COMMANDS, LIGHTNING_SUBCOMMANDS

    assert set(_extras.COMMAND_EXTRAS) == set(COMMANDS) | set(LIGHTNING_SUBCOMMANDS)
    assert set(_extras.COMMAND_EXTRAS.values()) <= set(_extras.EXTRAS)
