"""Every experiment script's --help runs, and each of its options has a help text and shows its default."""
import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted(p for p in (Path(__file__).resolve().parents[2] / "experiments").glob("*.py")
                 if not p.name.startswith("_"))  # _bench.py: the shared harness, a module


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_help(path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location(f"_exp_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # dataclasses look their module up while it executes
    spec.loader.exec_module(mod)
    parsers = []
    orig = argparse.ArgumentParser.parse_args

    def spy(self, *a, **k):
        parsers.append(self)
        return orig(self, *a, **k)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", spy)
    with pytest.raises(SystemExit) as e:
        mod.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:")
    (p,) = parsers
    assert issubclass(p.formatter_class, argparse.ArgumentDefaultsHelpFormatter)
    assert p.description
    for act in p._actions:
        if act.help == argparse.SUPPRESS or isinstance(act, argparse._HelpAction):
            continue
        assert act.help, f"{path.name}: {act.option_strings} has no help"
        assert act.option_strings[0] in out
    # defaults are printed (one that is easy to spot in every script)
    assert "(default:" in out
