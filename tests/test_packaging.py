"""Packaging: license, type marker, metadata, no developer paths; a non-editable wheel carries every module."""
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None


def test_license_typed_marker_changelog():
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert "Copyright (c) 2026 the torchfair authors" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "torchfair" / "py.typed").is_file()
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text


def test_changelog_is_keep_a_changelog():
    """Versions (`## [Unreleased]`, `## [x.y.z] - date`) each grouped by the six kinds of change; no issue numbers."""
    import re
    lines = (ROOT / "CHANGELOG.md").read_text().splitlines()
    versions = [ln for ln in lines if ln.startswith("## ")]
    assert versions and versions[0] == "## [Unreleased]", versions
    assert all(re.fullmatch(r"## \[(Unreleased|\d+\.\d+\.\d+)\]( - \d{4}-\d{2}-\d{2})?", v) for v in versions), versions
    kinds = [ln for ln in lines if ln.startswith("### ")]
    assert kinds and set(kinds) <= {f"### {k}" for k in ("Added", "Changed", "Deprecated", "Removed", "Fixed",
                                                          "Security")}, kinds
    assert not [ln for ln in lines if re.search(r"\bissue \d+", ln, re.I)]


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_metadata():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    proj = meta["project"]
    assert proj["license"] == "MIT" and proj["license-files"] == ["LICENSE"]
    assert proj["authors"] and proj["keywords"] and "Typing :: Typed" in proj["classifiers"]
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["torchfair"]
    assert proj["scripts"]["torchfair"] == "torchfair.cli:main"
    import torchfair
    assert proj["version"] == torchfair.__version__


def test_no_developer_paths_in_sources():
    bad = ("/work/", "/home/", "/root/", "/Users/")
    hits = [f"{p.relative_to(ROOT)}: {b}" for p in list((ROOT / "tests").glob("*.py")) + list(
        (ROOT / "torchfair").rglob("*.py")) for b in bad if b in p.read_text() and p.name != "test_packaging.py"]
    assert not hits


@pytest.mark.slow
def test_wheel_contains_every_module(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "-w", str(tmp_path), "--no-deps",
                        "--no-build-isolation", "-q"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    (whl,) = tmp_path.glob("torchfair-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    want = {str(p.relative_to(ROOT)) for p in (ROOT / "torchfair").rglob("*.py")} | {"torchfair/py.typed"}
    assert want <= names, sorted(want - names)
    assert any(n.endswith("licenses/LICENSE") for n in names)


# ------------------------------------------------------------------------------- the core install and its extras
#: what each extra's modules are distributed as (the names pyproject.toml must require)
DISTRIBUTIONS = {"pytorch_lightning": "pytorch-lightning", "torchmetrics": "torchmetrics", "pandas": "pandas",
                 "matplotlib": "matplotlib", "jsonargparse": "jsonargparse", "yaml": "pyyaml", "optuna": "optuna",
                 "filelock": "filelock", "pyarrow": "pyarrow", "ray": "ray"}
#: made unimportable in the subprocesses below, as in a plain `pip install torchfair` (torch brings filelock, but
#: torchfair's core must not need it either)
NOT_CORE = tuple(DISTRIBUTIONS) + ("lightning",)
BLOCK = (f"import sys\nclass _Uninstalled:\n    def find_spec(self, name, path=None, target=None):\n"
         f"        if name.partition('.')[0] in {NOT_CORE!r}:\n"
         f"            raise ModuleNotFoundError(f'No module named {{name!r}}', name=name)\n"
         f"sys.meta_path.insert(0, _Uninstalled())\n")
CORE_CODE = """
import json, os, sys, tempfile, torch
from torchfair.metrics import dips, ndcg
from torchfair.losses import DIPSLoss
from torchfair.orderings import Hard, RampRank
from torchfair.rerank import fa_ir
from torchfair.compat import expeval, fairranktune, trec_fair
from torchfair.evaluation import evaluate_lists, read_trec
import torchfair.browsing, torchfair.data
s = torch.tensor([[3.0, 2.0, 1.0, 0.0], [0.5, 2.0, 1.5, 0.1]], dtype=torch.float64)
y = torch.tensor([[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
g = torch.tensor([[0, 1, 0, 1], [1, 1, 0, 0]])
x = s.clone().requires_grad_()
DIPSLoss(ordering=RampRank())(x, y, g).backward()
d = tempfile.mkdtemp()
with open(os.path.join(d, "run"), "w") as f:
    f.write("".join(f"q{q} Q0 d{i} {i + 1} {float(s[q, i])} t\\n" for q in range(2) for i in range(4)))
with open(os.path.join(d, "qrels"), "w") as f:
    f.write("".join(f"q{q} 0 d{i} {int(y[q, i])}\\n" for q in range(2) for i in range(4)))
table = evaluate_lists(read_trec(os.path.join(d, "run"), os.path.join(d, "qrels")).lists, ["ndcg"], bootstrap=0)
print(json.dumps({"dips": dips(s, y, g, reduction="mean").tolist(), "ndcg": ndcg(s, y).tolist(),
                  "grad": x.grad.tolist(), "fa_ir": fa_ir(s, g, p=0.5).ranking.tolist(),
                  "table": table.mean["ndcg"], "blocked": [m for m in sys.modules if m in NOT_CORE]}))
"""


#: a Python process that imports torch once, with the extras blocked, then runs each program it is sent in a fork
#: of itself: the program starts as ``python -c`` would after torch's import (no torchfair module loaded), its
#: output goes to the files it is given, and an uncaught exception or ``SystemExit`` ends the fork as it ends an
#: interpreter (the traceback on stderr, the exit status); torch's import is paid once, not once per program
_FORKER = BLOCK + """
import json, os
import torch
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        out = os.open(job["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err = os.open(job["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdin = None
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(compile(job["code"], "<string>", "exec"), namespace)
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    print(json.dumps(os.waitstatus_to_exitcode(status)), flush=True)
"""


@pytest.fixture(scope="module")
def forker():
    """The process of :data:`_FORKER` (started once per module)."""
    proc = subprocess.Popen([sys.executable, "-c", _FORKER], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    yield proc
    proc.stdin.close()
    proc.wait(timeout=60)


@pytest.fixture
def python(forker, tmp_path):
    """``python(code)``: ``code`` run as by ``python -c`` in a process where no extra can be imported (a fork of
    :func:`forker`); a ``CompletedProcess`` with its exit status and output."""
    import json
    import select

    def run(code: str) -> subprocess.CompletedProcess:
        out, err = tmp_path / "stdout", tmp_path / "stderr"
        forker.stdin.write(json.dumps({"code": code, "out": str(out), "err": str(err)}) + "\n")
        forker.stdin.flush()
        ready, _, _ = select.select([forker.stdout], [], [], 300)
        assert ready, "the program did not end within 300 s"
        rc = json.loads(forker.stdout.readline())
        return subprocess.CompletedProcess(["python", "-c", code], rc, out.read_text(), err.read_text())
    return run


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("code", ["import torchfair.training", "print('out')\nprint('err', file=sys.stderr)\nsys.exit(3)"],
                         ids=["uncaught-exception", "exit-status"])
def test_the_forked_programs_are_run_as_by_python_c(python, code):
    """What the tests below read of a program run by :func:`python` (exit status, stdout, the last line of
    stderr) is what ``python -c`` gives, with the extras blocked."""
    want, got = _python(BLOCK + code), python(BLOCK + code)
    assert (got.returncode, got.stdout, got.stderr.strip().splitlines()[-1:]) == \
        (want.returncode, want.stdout, want.stderr.strip().splitlines()[-1:])


def test_core_modules_work_without_any_extra(python):
    # in a process where no extra can be imported, the core modules import and give the numbers of the full install
    r = python(BLOCK + f"NOT_CORE = {NOT_CORE!r}\n" + CORE_CODE)
    assert r.returncode == 0, r.stderr
    import json
    core = json.loads(r.stdout.strip().splitlines()[-1])
    full: dict = {}
    with pytest.MonkeyPatch.context() as mp:  # the same code in this process, where every extra is installed
        import io
        out = io.StringIO()
        mp.setattr(sys, "stdout", out)
        exec(f"NOT_CORE = {NOT_CORE!r}\n" + CORE_CODE, full)
    assert json.loads(out.getvalue().strip().splitlines()[-1]) | {"blocked": []} == core
    # NDCG's definition (gain 2^y - 1, discount 1 / log2(1 + rank)) by hand: list 1 ranks its two relevant items
    # 2nd and 4th, list 2 (order 2.0, 1.5, 0.5, 0.1) 2nd and 3rd; the ideal ranks them 1st and 2nd
    import math
    ideal = 1 + 1 / math.log2(3)
    assert core["ndcg"] == pytest.approx([(1 / math.log2(3) + 1 / math.log2(5)) / ideal,
                                          (1 / math.log2(3) + 1 / math.log2(4)) / ideal], abs=1e-12)
    assert core["table"] == pytest.approx(sum(core["ndcg"]) / 2, abs=1e-6)


@pytest.mark.parametrize("code, line", [
    ("import torchfair.training", "torchfair.training needs the [train] extra"),
    ("import torchfair.sweeps", "torchfair.sweeps needs the [sweep] extra"),
    ("from torchfair.metrics import DIPS", "torchfair.metrics.classes (the Metric classes: torchfair.metrics.DIPS"
                                           "...) needs the [torchmetrics] extra"),
    ("from torchfair.evaluation import PositionShares",
     "torchfair.evaluation.PositionShares / PooledMPC needs the [torchmetrics] extra"),
    ("from torchfair.data import MovieLens", "torchfair.data.movielens needs the [train] extra"),
])
def test_a_missing_extra_is_one_import_error_line(code, line, python):
    r = python(BLOCK + code)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    extra = line.split("the [")[1].split("]")[0]
    assert last.startswith("torchfair._extras.MissingExtraError: " + line + " (") and \
        last.endswith(f"not installed): pip install 'torchfair[{extra}]'"), last


@pytest.mark.parametrize("argv, extra", [(["metrics", "--run", "r.txt"], "cli"), (["fit", "--help"], "train"),
                                         (["evaluate", "--ckpts", "x"], "train"), (["sweep", "s.yaml"], "sweep")])
def test_a_command_without_its_extra_prints_one_line_and_exits_2(argv, extra, python):
    r = python(BLOCK + f"from torchfair.cli import main\nsys.exit(main({argv!r}))")
    assert r.returncode == 2 and r.stdout == "", r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"torchfair {argv[0]}: error: torchfair {argv[0]} needs the [{extra}] extra (") and \
        line.endswith(f"not installed): pip install 'torchfair[{extra}]'"), line


def _requirement(req: str) -> tuple:
    """``"torchfair[a,b]"`` -> ``("torchfair", ("a", "b"))``; ``"jsonargparse[signatures]>=4"`` -> its name."""
    import re
    m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[([^\]]*)\])?", req)
    return m.group(1).lower().replace("_", "-"), tuple(e.strip() for e in (m.group(2) or "").split(",") if e.strip())


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_core_dependencies_and_extras():
    from torchfair._extras import EXTRAS

    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert sorted(_requirement(r)[0] for r in proj["dependencies"]) == ["numba", "numpy", "torch"]
    extras = proj["optional-dependencies"]

    def closure(extra: str) -> set:
        out = set()
        for req in extras[extra]:
            name, sub = _requirement(req)
            out |= set().union(*(closure(e) for e in sub)) if name == "torchfair" else {name}
        return out

    # every module torchfair's error lines attribute to an extra is required by that extra (and the names exist)
    for extra, modules in EXTRAS.items():
        assert {DISTRIBUTIONS[m] for m in modules} <= closure(extra), extra
    # `make install` (.[dev]) installs every extra the test suite exercises, and the docs build
    assert {n for e in ("train", "sweep", "parquet", "docs", "tensorboard") for n in closure(e)} <= closure("dev")
    assert {"sphinx", "myst-parser"} <= closure("docs")
