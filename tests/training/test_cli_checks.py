"""torchfair/training/cli_checks.py: what `torchfair fit|validate|test|predict|sweep` checks before Lightning is
imported: the --config files, a sweep file given as --config, the model's re-ranker spec and measure requests."""
import subprocess
import sys
from pathlib import Path

import pytest

from torchfair.training.cli_checks import check_argv, config_paths

ROOT = Path(__file__).resolve().parents[2]
LISTNET = str(ROOT / "configs" / "ml100k_listnet.yaml")
SMOKE = str(ROOT / "configs" / "sweep_smoke.yaml")


def test_config_paths_leave_inline_yaml_alone():
    argv = ["--config", "a.yaml", "-c", "b.yaml", "--config=c.yaml", "--config", "{model: {lam: 1}}",
            "--config", "model:\n  lam: 1"]
    assert config_paths(argv) == [(0, "a.yaml"), (2, "b.yaml"), (4, "c.yaml")]


def test_good_arguments_pass(tmp_path):
    check_argv(["fit", "--config", LISTNET, "--model.rerank", "fa_ir:p=0.4", "--model.measures", "[ndcg@10, dips]"])
    check_argv(["fit", "--config", "{model: {lam: 1}}", "--model.rerank=null"])
    check_argv(["sweep", SMOKE, "--out", str(tmp_path / "s")])


@pytest.mark.parametrize("make, says", [
    (lambda d: str(d / "missing.yaml"), "--config: no such file: "),
    (lambda d: str(d), "--config: not a file: "),
    (lambda d: (d / "bad.yaml").write_text("model: [\n") and str(d / "bad.yaml"), "is not a YAML file"),
])
def test_a_config_file_that_cannot_be_read(make, says, tmp_path):
    with pytest.raises(ValueError, match=says):
        check_argv(["fit", "--config", make(tmp_path)])


@pytest.mark.parametrize("args, says", [
    (["--model.rerank", "targeted:measure=dips,kep=9"], "--model.rerank 'targeted:measure=dips,kep=9': 'kep' is "
                                                        "neither an option"),
    (["--model.rerank=fa_ir:p=2"], "--model.rerank 'fa_ir:p=2': `p` must be"),
    (["--model.measures", "[ndcg@10, dipz]"], "--model.measures 'dipz': unknown measure 'dipz' (did you mean "
                                              "'dips'?)"),
    (["--model.init_args.measures", "dips:tie_weght=0"], "(did you mean 'tie_weight'?)"),
])
def test_a_bad_spec_on_the_command_line(args, says):
    with pytest.raises(ValueError) as e:
        check_argv(["fit", "--config", LISTNET] + args)
    assert says in str(e.value), str(e.value)


@pytest.mark.parametrize("model", ["model:\n  rerank: fair:p=0.5\n",
                                   "model:\n  class_path: torchfair.training.FairRankingModule\n  init_args:\n"
                                   "    rerank: fair:p=0.5\n"])
def test_a_bad_spec_in_a_config_file_and_the_command_line_wins(model, tmp_path):
    (tmp_path / "m.yaml").write_text(model)
    with pytest.raises(ValueError, match=r"^--model\.rerank 'fair:p=0.5': unknown re-ranker 'fair' \(did you mean "
                                         r"'fa_ir'\?\)"):
        check_argv(["fit", "--config", LISTNET, "--config", str(tmp_path / "m.yaml")])
    check_argv(["fit", "--config", str(tmp_path / "m.yaml"), "--model.rerank", "fa_ir:p=0.5"])
    with pytest.raises(ValueError, match="fair:p=0.5"):  # the later config file wins, as in jsonargparse
        check_argv(["fit", "--model.rerank", "fa_ir:p=0.5", "--config", str(tmp_path / "m.yaml")])


def test_a_sweep_file_as_config_names_the_positional_form():
    with pytest.raises(ValueError) as e:
        check_argv(["sweep", "--out", "runs/s", "--config", SMOKE, "--workers", "2"])
    assert str(e.value) == (f"--config {SMOKE} is a sweep file; `torchfair sweep` takes the sweep file as its first "
                            f"argument: torchfair sweep {SMOKE} --out runs/s --workers 2")
    with pytest.raises(ValueError, match=f"torchfair sweep {SMOKE} --out runs/s$"):
        check_argv(["sweep", f"--config={SMOKE}", "--out", "runs/s"])
    check_argv(["fit", "--config", SMOKE])  # not a sweep command: Lightning's parser answers


def test_the_command_answers_before_importing_lightning(tmp_path):
    """`torchfair fit --config <missing>` and a bad `--model.rerank`: one line, exit 2, Lightning never imported."""
    code = ("import sys\nfrom torchfair.cli import main\n"
            f"a = main(['fit', '--config', {str(tmp_path / 'missing.yaml')!r}])\n"
            f"b = main(['fit', '--config', {LISTNET!r}, '--model.rerank', 'targetd'])\n"
            "print(a, b, 'pytorch_lightning' in sys.modules, 'lightning' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.stdout.split() == ["2", "2", "False", "False"], proc.stderr[-2000:]
    err = proc.stderr.strip().splitlines()
    assert len(err) == 2 and err[0] == f"torchfair fit: error: --config: no such file: {tmp_path / 'missing.yaml'}"
    assert err[1].startswith("torchfair fit: error: --model.rerank 'targetd': unknown re-ranker 'targetd' (did you "
                             "mean 'targeted'?); known: none, fa_ir, "), err
