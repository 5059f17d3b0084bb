"""The ``torchfair metrics`` command and the file readers."""
import json
import math

import numpy as np
import pytest
import torch

from torchfair.cli import main
from torchfair.evaluation.files import split_measures
from torchfair.evaluation import EvaluationTable, read_table, read_trec
from torchfair.metrics import pairwise as pw

RUN = """\
q1 Q0 d1 1 3.0 sys
q1 Q0 d2 2 2.5 sys
q1 Q0 d3 3 2.0 sys
q1 Q0 d4 4 1.0 sys
q1 Q0 dX 5 0.5 sys
q2 Q0 d5 1 0.9 sys
q2 Q0 d2 2 0.8 sys
q2 Q0 d6 3 0.7 sys
q2 Q0 d7 4 0.1 sys
"""
QRELS = """\
q1 0 d1 0
q1 0 d2 2
q1 0 d3 1
q1 0 d4 2
q1 0 d9 2
q2 0 d5 1
q2 0 d2 0
q2 0 d6 2
q2 0 d7 1
"""
GROUPS = """\
# docid group
d1 news
d2 blog
d3 news
d4 blog
d5 news
d6 blog
d7 blog
"""
# ranked orders (by score): q1 d1 d2 d3 d4 dX ; q2 d5 d2 d6 d7 ; blog=0 < news=1 (sorted names)
EXPECT = {
    "q1": dict(scores=[3.0, 2.5, 2.0, 1.0, 0.5], rel=[0, 2, 1, 2, 0], groups=[1, 0, 1, 0, -1]),
    "q2": dict(scores=[0.9, 0.8, 0.7, 0.1], rel=[1, 0, 2, 1], groups=[1, 0, 0, 0]),
}


def direct(q, fn, **kw):
    e = EXPECT[q]
    return fn(torch.tensor(e["scores"], dtype=torch.float64), torch.tensor(e["rel"], dtype=torch.float64),
              torch.tensor(e["groups"]), num_groups=2, return_valid=True, **kw)


@pytest.fixture
def trec(tmp_path):
    (tmp_path / "run.txt").write_text(RUN)
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "groups.txt").write_text(GROUPS)
    return tmp_path


def test_read_trec(trec):
    with pytest.raises(ValueError, match=r"run\.txt:5: document 'dX' of query 'q1' has no group label"):
        read_trec(trec / "run.txt", trec / "qrels.txt", trec / "groups.txt")
    data = read_trec(trec / "run.txt", trec / "qrels.txt", trec / "groups.txt", missing_groups="unknown")
    assert len(data.warnings) == 1 and "1 ranked documents have no group label" in data.warnings[0]
    assert data.group_names == ["blog", "news"]
    assert [d["list_id"] for d in data.lists] == ["q1", "q2"]
    q1 = data.lists[0]
    assert q1["item_ids"] == ["d1", "d2", "d3", "d4", "dX"]
    assert q1["relevance"].tolist() == EXPECT["q1"]["rel"]  # dX unjudged -> 0
    assert q1["groups"].tolist() == EXPECT["q1"]["groups"]  # dX no group -> -1
    assert any("not in the qrels" in n for n in data.notes)


def test_cli_trec_end_to_end(trec, capsys):
    out_json, out_csv = trec / "res.json", trec / "res.csv"
    rc = main(["metrics", "--run", str(trec / "run.txt"), "--qrels", str(trec / "qrels.txt"), "--groups",
               str(trec / "groups.txt"), "--missing-groups", "unknown", "--measures", "dips,igi", "kendall_tau",
               "--browsing", "rbp:0.8",
               "--bootstrap", "200", "--out-json", str(out_json), "--out-csv", str(out_csv)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "| dips_AB |" in printed and "groups: A=blog, B=news" in printed
    t = EvaluationTable.from_json(out_json)
    assert t.list_ids == ["q1", "q2"]
    from torchfair.browsing import RBP
    for i, q in enumerate(["q1", "q2"]):
        M, ok = direct(q, pw.dips, browsing=RBP(0.8))
        for col, (g, h) in {"dips_AB": (0, 1), "dips_BA": (1, 0)}.items():
            assert (t[col][i] == pytest.approx(float(M[g, h]))) if ok[g, h] else math.isnan(t[col][i])
        I, iok = direct(q, pw.igi)
        assert (t["igi_AB"][i] == pytest.approx(float(I[0, 1]))) if iok[0, 1] else math.isnan(t["igi_AB"][i])
        e = EXPECT[q]
        tau = pw.kendall_tau(torch.tensor(e["scores"]), torch.tensor(e["rel"], dtype=torch.float32))
        assert t["kendall_tau"][i] == pytest.approx(float(tau))
    assert t.mean["kendall_tau"] == pytest.approx(float(np.mean(t["kendall_tau"])))
    assert t.meta["group_names"] == ["blog", "news"]
    t2 = EvaluationTable.from_csv(out_csv)
    np.testing.assert_allclose(t2.values, t.values, equal_nan=True)


def test_cli_five_column_qrels_and_expeval_layout(trec, capsys):
    gmap = dict(line.split() for line in GROUPS.splitlines() if not line.startswith("#"))
    five = "".join(f"{line} {gmap.get(line.split()[2], '')}".rstrip() + "\n" for line in QRELS.splitlines())
    (trec / "qrels5.txt").write_text(five)
    ids = {"blog": "0", "news": "1"}
    itr = "".join(f"{q} {ids[gmap[d]]} {d} {r}\n" for q, _, d, r in (l.split() for l in QRELS.splitlines())
                  if d in gmap)
    (trec / "qrels_expeval.txt").write_text(itr)
    base = ["metrics", "--run", str(trec / "run.txt"), "--measures", "dips", "--bootstrap", "0", "--format", "json",
            "--missing-groups", "unknown"]
    outs = []
    for extra in (["--qrels", str(trec / "qrels.txt"), "--groups", str(trec / "groups.txt")],
                  ["--qrels", str(trec / "qrels5.txt")],
                  ["--qrels", str(trec / "qrels_expeval.txt"), "--qrels-groups", "iter"]):
        assert main(base + extra) == 0
        outs.append(json.loads(capsys.readouterr().out))
    # same relevance and groups everywhere (blog -> 0, news -> 1) except d9 (not in run) and dX
    assert outs[0]["lists"] == outs[1]["lists"] == outs[2]["lists"]


def test_cli_csv_table(tmp_path, capsys):
    rows = ["list_id,item_id,score,relevance,group"]
    g = torch.Generator().manual_seed(0)
    lists = {}
    for q, n in (("a", 5), ("b", 3), ("c", 7)):
        s = torch.rand(n, generator=g, dtype=torch.float64)
        r = torch.randint(0, 3, (n,), generator=g).double()
        gr = torch.randint(0, 2, (n,), generator=g)
        lists[q] = (s, r, gr)
        rows += [f"{q},{q}{i},{float(s[i])!r},{int(r[i])},{int(gr[i])}" for i in range(n)]
    (tmp_path / "items.csv").write_text("\n".join(rows) + "\n")
    rc = main(["metrics", "--table", str(tmp_path / "items.csv"), "--measures", "dips:browsing=uniform",
               "--bootstrap", "100", "--out-json", str(tmp_path / "o.json")])
    assert rc == 0
    t = EvaluationTable.from_json(tmp_path / "o.json")
    assert t.list_ids == ["a", "b", "c"]
    vals = []
    for i, q in enumerate("abc"):
        M, ok = pw.dips(*lists[q], browsing="uniform", num_groups=2, return_valid=True)
        if ok[0, 1] and ok[1, 0]:
            vals.append(float(M[0, 1] - M[1, 0]))
            assert t["dips_gap"][i] == pytest.approx(vals[-1])
    assert t.mean["dips_gap"] == pytest.approx(sum(vals) / len(vals))
    assert t.ci_low["dips_gap"] <= t.mean["dips_gap"] <= t.ci_high["dips_gap"]
    assert "| dips_gap |" in capsys.readouterr().out


def test_read_table_missing_columns_and_parquet(tmp_path):
    (tmp_path / "x.csv").write_text("qid,docid,score\n1,a,0.5\n1,b,0.2\n")
    data = read_table(tmp_path / "x.csv")
    assert data.lists[0]["relevance"] is None and not data.has_groups
    (tmp_path / "bad.csv").write_text("foo,score\n1,2\n")
    with pytest.raises(ValueError, match="list_id"):
        read_table(tmp_path / "bad.csv")
    try:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        (tmp_path / "x.parquet").write_bytes(b"PAR1")
        with pytest.raises(ImportError, match="pandas"):
            read_table(tmp_path / "x.parquet")


def test_cli_errors_and_misc(trec, capsys):
    assert main(["metrics"]) == 2
    assert "no input" in capsys.readouterr().err
    assert main(["metrics", "--run", str(trec / "run.txt"), "--qrels", str(trec / "qrels.txt"),
                 "--measures", "dips"]) == 2
    assert "needs group labels" in capsys.readouterr().err
    assert main(["metrics", "--run", str(trec / "run.txt"), "--measures", "nope"]) == 2
    assert main(["metrics", "--list-measures"]) == 0
    assert "dips" in capsys.readouterr().out
    assert main([]) == 2
    assert main(["--version"]) == 0
    assert split_measures(["dips,ndcg@10", "igi:tie_weight=0.5,browsing=rbp:0.8,label=i", "ree"]) == \
        ["dips", "ndcg@10", "igi:tie_weight=0.5,browsing=rbp:0.8,label=i", "ree"]


@pytest.mark.parametrize("command", ["metrics", "evaluate", "sweep", "sweep-report"])
def test_every_subcommand_takes_config_and_print_config(tmp_path, capsys, command):
    """One CLI system (jsonargparse, as LightningCLI): --print_config prints a YAML of the command's options, and
    that YAML given back as --config sets them (a command-line option after it still wins)."""
    import yaml

    positional = ["DIR"] if command == "sweep-report" else []
    assert main([command] + positional + ["--print_config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert isinstance(printed, dict) and "config" not in printed
    option = {"metrics": "bootstrap", "evaluate": "bootstrap", "sweep": "workers", "sweep-report": "split"}[command]
    assert option in printed
    printed[option] = {"bootstrap": 7, "workers": 3, "split": "val"}[option]
    (tmp_path / "opts.yaml").write_text(yaml.safe_dump(printed))
    assert main([command] + positional + ["--config", str(tmp_path / "opts.yaml"), "--print_config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)[option] == printed[option]
    if command == "metrics":
        assert main([command, "--config", str(tmp_path / "opts.yaml"), "--bootstrap", "9", "--print_config"]) == 0
        assert yaml.safe_load(capsys.readouterr().out)["bootstrap"] == 9


def test_metrics_runs_from_a_config_file(trec, tmp_path, capsys):
    """The same table from options on the command line and from the same options in a --config YAML."""
    args = ["--run", str(trec / "run.txt"), "--qrels", str(trec / "qrels.txt"), "--groups", str(trec / "groups.txt"),
            "--measures", "dips", "ndcg@10", "--bootstrap", "50", "--format", "json", "--missing-groups", "unknown"]
    assert main(["metrics"] + args) == 0
    direct = json.loads(capsys.readouterr().out)
    (tmp_path / "m.yaml").write_text(
        f"run: [{trec / 'run.txt'}]\nqrels: {trec / 'qrels.txt'}\ngroups: {trec / 'groups.txt'}\n"
        "measures: [dips, ndcg@10]\nbootstrap: 50\nformat: json\nmissing_groups: unknown\n")
    assert main(["metrics", "--config", str(tmp_path / "m.yaml")]) == 0
    assert json.loads(capsys.readouterr().out) == direct


def test_unknown_option_is_one_line_naming_it(capsys):
    assert main(["metrics", "--bogus", "1"]) == 2
    err = capsys.readouterr().err
    assert "--bogus" in err and len(err.strip().splitlines()) <= 2


def test_dashed_option_spellings_parse(trec, capsys):
    """Options follow the parameter names (`--out_json`, `--names`); dashed spellings (`--out-json`) and `=` mean
    them too. The earlier names of the hand-written parser (`--name`, `--ckpt`, `--trials`) are gone (no shims
    before 0.1.0): an unknown option, a one-line error."""
    run, qrels = str(trec / "run.txt"), str(trec / "qrels.txt")
    new = ["--run", run, "--run", run, "--names", "a", "b", "--qrels", qrels, "--measures", "ndcg@10",
           "--bootstrap", "0", "--format", "json"]
    dashed = ["--run", run, "--run", run, "--names", "a", "--names", "b", "--qrels", qrels, "--measures=ndcg@10",
              "--bootstrap=0", "--format", "json"]
    assert main(["metrics"] + new) == 0
    a = capsys.readouterr().out
    assert main(["metrics"] + dashed) == 0
    assert capsys.readouterr().out == a and '"b"' in a
    old = ["--run", run, "--run", run, "--name", "a", "--name", "b", "--qrels", qrels, "--format", "json"]
    assert main(["metrics"] + old) == 2
    assert "--name" in capsys.readouterr().err


# ------------------------------------------------------------------------------------- options and errors (issue 33)
@pytest.mark.parametrize("argv, value", [([], False), (["--trec"], True), (["--trec", "true"], True),
                                         (["--trec", "false"], False), (["--trec=false"], False),
                                         (["--trec", "--bootstrap", "0"], True)])
def test_a_bool_option_is_a_bare_flag_or_takes_a_value(argv, value):
    from torchfair.cli import _argv, _options, build_parser

    assert build_parser("metrics").parse_args(_argv(_options("metrics"), argv)).trec is value


def test_a_bool_option_from_a_config_file_and_print_config(tmp_path, capsys):
    import yaml

    from torchfair.cli import build_parser as build_parser_

    (tmp_path / "o.yaml").write_text("trec: true\nper_list: true\n")
    cfg = build_parser_("metrics").parse_args(["--config", str(tmp_path / "o.yaml")])
    assert cfg.trec is True and cfg.per_list is True and cfg.quiet is False
    assert main(["metrics", "--trec", "--print_config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["trec"] is True
    # Optional[bool] (evaluate's --stream): unset is None, bare is True
    assert build_parser_("evaluate").parse_args(["--ckpts", "[a]"]).stream is None
    assert build_parser_("evaluate").parse_args(["--ckpts", "[a]", "--stream"]).stream is True


def test_a_bad_bool_value_is_one_line_naming_the_option(capsys):
    assert main(["metrics", "--run", "x.txt", "--trec", "maybe"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["torchfair metrics: error: --trec must be of type bool; got maybe (torchfair metrics --help for "
                   "the options)"]


@pytest.mark.parametrize("message, options, where, line", [
    ('Parser key "model.lam":\n  Not of type NonNegativeFloat: -1 does not conform to restriction v>=0', None, None,
     "--model.lam must be a number >= 0 (NonNegativeFloat); got -1"),
    ('Parser key "val_fraction":\n  Not of type UnitIntervalClosedOpen: 1 does not conform to restriction v>=0 and '
     'v<1', None, None, "--val_fraction must be a number >= 0 and < 1 (UnitIntervalClosedOpen); got 1"),
    ('Parser key "n":\n  Not of type PositiveInt: invalid literal for int() with base 10: \'x\'', None, None,
     "--n must be an int > 0 (PositiveInt): invalid literal for int() with base 10: 'x'"),
    ("Parser key \"s\":\n  Expected a typing.Literal['a', 'b']. Got value: c", None, None,
     "--s must be one of 'a', 'b'; got c"),
    ('Parser key "k":\n  Does not validate against any of the Union subtypes\n  Subtypes: [PositiveInt, NoneType]\n'
     '  Errors:\n    - Not of type PositiveInt: 0 does not conform to restriction v>0\n'
     "    - Expected a <class 'NoneType'>\n  Given value type: <class 'int'>\n  Given value: 0", None, None,
     "--k must be an int > 0 (PositiveInt); got 0"),
    ("`names`: 1 name(s) for 2 run file(s)", {"names": "--names"}, None, "--names: 1 name(s) for 2 run file(s)"),
    ("`test_fraction + val_fraction` must be < 1\n(split='random')",
     {"test_fraction": "--data.test_fraction", "val_fraction": "--data.val_fraction"}, "--data",
     "--data.test_fraction + --data.val_fraction must be < 1; (split='random')"),
    ("must name a genre", {"genre": "--data.genre"}, "--data", "--data: must name a genre"),
    ("`ranker_args.dim` must be > 0", {"ranker_args": "--model.ranker_args"}, "--model",
     "--model.ranker_args.dim must be > 0"),
    ("`terms`[0]: 'ndcg' is a utility measure; `x.y` stays", {"terms": "--model.loss.terms"}, "--model",
     "--model.loss.terms[0]: 'ndcg' is a utility measure; `x.y` stays"),
    ("`--ckpts` a.ckpt: no such file", {"ckpts": "--ckpts"}, None, "--ckpts a.ckpt: no such file"),
])
def test_the_one_error_formatter(message, options, where, line):
    """Every command's one line comes from torchfair._extras.error_line: jsonargparse's errors name the option,
    the library's backticked parameters are written as the options."""
    from torchfair._extras import error_line, error_text

    assert error_text(ValueError(message), options, where=where) == line
    assert error_line("fit", message, options, where=where, hint=True) == \
        f"torchfair fit: error: {line} (torchfair fit --help for the options)"


def test_no_private_hooks_in_the_command_line():
    """cli.py, training/cli.py and training/module.py use argparse's, jsonargparse's and Lightning's public API only:
    no private attribute of another object (``parser._actions``, ``action._typehint``), no private name imported
    from another package (``_given_hyperparameters``), no private LightningCLI method overridden."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "torchfair"
    found = []
    for rel in ("cli.py", "training/cli.py", "training/module.py", "_extras.py"):
        for node in ast.walk(ast.parse((root / rel).read_text())):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{rel}:{node.lineno}: .{node.attr}")
            if isinstance(node, ast.ImportFrom) and not node.level and not (node.module or "").startswith("torchfair"):
                found += [f"{rel}:{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("_")]
    assert not found, found
    pytest.importorskip("pytorch_lightning")
    from pytorch_lightning.cli import LightningCLI

    from torchfair.training.cli import FairLightningCLI

    overridden = [n for n in vars(FairLightningCLI) if n.startswith("_") and not n.startswith("__")
                  and hasattr(LightningCLI, n)]
    assert overridden == []


# ------------------------------------------------------------------------------------------------ sweep, warmup
def test_sweep_config_spelling_of_the_last_release_answers_with_the_right_command(tmp_path, capsys):
    """`torchfair sweep --config configs/sweep_smoke.yaml` (0.0.x) names the positional form with the user's other
    options, in one line, and starts nothing; a --config of the command's own options still works."""
    from pathlib import Path

    pytest.importorskip("optuna")
    smoke = str(Path(__file__).resolve().parents[1] / "configs" / "sweep_smoke.yaml")
    out = tmp_path / "s"
    assert main(["sweep", "--config", smoke, "--out", str(out), "--workers", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("torchfair sweep: error: ") and "is not accepted" not in err[0], err
    assert err[0].endswith(f"takes the sweep file as its first argument: torchfair sweep {smoke} --out {out} "
                           "--workers 2"), err
    assert not out.exists()
    (tmp_path / "opts.yaml").write_text("workers: 3\n")
    assert main(["sweep", smoke, "--config", str(tmp_path / "opts.yaml"), "--print_config"]) == 0
    assert "workers: 3" in capsys.readouterr().out


def test_the_sweep_files_give_the_positional_form():
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[1] / "configs").glob("sweep_*.yaml")):
        assert "sweep --config" not in path.read_text(), path


def test_warmup_command_prints_the_seconds(monkeypatch, capsys):
    """`torchfair warmup` calls torchfair.warmup(); with TORCHFAIR_KERNELS=torch there is nothing to compile."""
    import re

    monkeypatch.setenv("TORCHFAIR_KERNELS", "torch")
    assert main(["warmup"]) == 0
    assert re.fullmatch(r"torchfair warmup: kernels ready in 0\.0 s\n", capsys.readouterr().out)
    assert main(["warmup", "--help"]) == 0
    assert "compile the CPU kernels" in capsys.readouterr().out
    assert main(["warmup", "--now"]) == 2
    assert capsys.readouterr().err.strip() == "torchfair warmup: error: takes no options; got --now"
    monkeypatch.setenv("TORCHFAIR_KERNELS", "fast")
    assert main(["warmup"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "TORCHFAIR_KERNELS" in err[0], err
    assert main(["--help"]) == 0 and "  warmup " in capsys.readouterr().out


# ------------------------------------------------------------------------------------ specs before work (issue 34)
@pytest.mark.parametrize("argv, says", [
    (["metrics", "--run", "missing.txt", "--measures", "ndcg@10", "dips:tie_weght=0"],
     "torchfair metrics: error: --measures 'dips:tie_weght=0': measure 'dips' has no option 'tie_weght' (did you "
     "mean 'tie_weight'?); it accepts "),
    (["metrics", "--run", "missing.txt", "--measures", "dipz"],
     "torchfair metrics: error: --measures 'dipz': unknown measure 'dipz' (did you mean 'dips'?); available: "),
    (["evaluate", "--ckpts", "missing.ckpt", "--out", "OUT", "--rerank", "targeted:measure=dips,kep=9"],
     "torchfair evaluate: error: --rerank 'targeted:measure=dips,kep=9': 'kep' is neither an option of re-ranker "
     "'targeted' nor of measure 'dips' (did you mean 'keep'?); the re-ranker takes "),
    (["evaluate", "--ckpts", "missing.ckpt", "--out", "OUT", "--measures", "ndcg@10", "igi:tie_weight=2"],
     "torchfair evaluate: error: --measures 'igi:tie_weight=2': `tie_weight` must be "),
])
def test_a_spec_is_checked_in_full_before_any_file_is_read(argv, says, tmp_path, capsys):
    """The measure requests and re-ranker specs run once on tiny lists before any input is read: the error names
    the option and the spec (not the missing input file), with a "did you mean"."""
    if argv[0] == "evaluate":
        pytest.importorskip("pytorch_lightning")
    argv = [str(tmp_path / a) if a in ("OUT", "missing.txt", "missing.ckpt") else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(says), err
    assert list(tmp_path.iterdir()) == []
