"""Bad input to ``torchfair metrics`` and the file readers: an error naming the file and line, or an opt-in flag
with a warning; the same rules for TREC and CSV input.  Group labels with shares (partly unknown groups)."""
import json
import re

import pytest
import torch

import typing

from torchfair.cli import build_parser, main
from torchfair.evaluation.files import evaluate_files
from torchfair.evaluation import read_group_file, read_qrels, read_table, read_trec
from torchfair.evaluation import io as tio
from torchfair.metrics import exposure as ex
from torchfair.metrics import pairwise as pw

RUN = "q1 Q0 a 1 4 s\nq1 Q0 b 2 3 s\nq1 Q0 c 3 2 s\nq1 Q0 d 4 1 s\n"
QRELS = "q1 0 a 1\nq1 0 b 0\nq1 0 c 2\nq1 0 d 1\n"
GROUPS = "a x\nb y\nc x\nd y\n"
CSV = "qid,docid,score,rel,group\nq1,a,4,1,x\nq1,b,3,0,y\nq1,c,2,2,x\nq1,d,1,1,y\n"


def write(tmp_path, **files):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def cli(tmp_path, capsys, *args):
    rc = main(["metrics", *args, "--bootstrap", "0", "--format", "json"])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def trec_args(d, run="run.txt", qrels="qrels.txt", groups="groups.txt"):
    out = ["--run", str(d / run)]
    if qrels:
        out += ["--qrels", str(d / qrels)]
    if groups:
        out += ["--groups", str(d / groups)]
    return out


def test_cli_choices_match_the_reader():
    hints = typing.get_type_hints(evaluate_files)
    assert typing.get_args(hints["missing_groups"]) == tio.MISSING_GROUPS
    assert typing.get_args(hints["negative_grades"]) == tio.NEGATIVE_GRADES


# ------------------------------------------------------------------------------------------ missing groups
def test_document_missing_from_group_file_is_an_error_not_a_sign_flip(tmp_path, capsys):
    # d (group x, the only relevant page) is missing from the group file.  Read as "unknown", it still takes its
    # position, and the DIPS gap between x and y changes sign (+0.25 labelled, -0.5 unknown; both values by
    # brute force over pw.dips below): the reader must not do this silently.
    qrels = "q1 0 a 0\nq1 0 b 0\nq1 0 c 0\nq1 0 d 1\n"
    d = write(tmp_path, **{"run.txt": RUN, "qrels.txt": qrels, "groups.txt": "a x\nb y\nc y\n"})
    rc, out, err = cli(d, capsys, *trec_args(d), "--measures", "dips:browsing=uniform")
    assert rc == 2 and out == ""
    assert re.search(r"run\.txt:4: document 'd' of query 'q1' has no group label in .*groups\.txt", err)
    assert "--missing-groups unknown" in err
    rc, out, err = cli(d, capsys, *trec_args(d), "--measures", "dips:browsing=uniform", "--missing-groups", "unknown")
    assert rc == 0 and "warning: 1 ranked documents have no group label" in err
    lenient = _columns(json.loads(out))["dips_gap"]
    (d / "groups.txt").write_text("a x\nb y\nc y\nd x\n")
    rc, out, err = cli(d, capsys, *trec_args(d), "--measures", "dips:browsing=uniform")
    assert rc == 0 and "warning" not in err
    full = _columns(json.loads(out))["dips_gap"]
    s, r = torch.tensor([4., 3., 2., 1.]), torch.tensor([0., 0., 0., 1.])
    M1 = pw.dips(s, r, torch.tensor([0, 1, 1, 0]), browsing="uniform", num_groups=2)
    M2 = pw.dips(s, r, torch.tensor([0, 1, 1, -1]), browsing="uniform", num_groups=2)
    assert full == pytest.approx(float(M1[0, 1] - M1[1, 0])) == pytest.approx(0.25)
    assert lenient == pytest.approx(float(M2[0, 1] - M2[1, 0])) == pytest.approx(-0.5)


def test_missing_group_in_qrels_column_and_table(tmp_path, capsys):
    d = write(tmp_path, **{"run.txt": RUN, "qrels5.txt": "q1 0 a 1 x\nq1 0 b 0 y\nq1 0 c 2 x\nq1 0 d 1\n",
                           "t.csv": CSV.replace("q1,d,1,1,y", "q1,d,1,1,")})
    rc, _, err = cli(d, capsys, "--run", str(d / "run.txt"), "--qrels", str(d / "qrels5.txt"))
    assert rc == 2 and re.search(r"run\.txt:4: document 'd' .*group column of .*qrels5\.txt", err)
    rc, _, err = cli(d, capsys, "--table", str(d / "t.csv"))
    assert rc == 2 and re.search(r"t\.csv:5: document 'd' of query 'q1' has no group label in the 'group' column", err)
    rc, out, err = cli(d, capsys, "--table", str(d / "t.csv"), "--missing-groups", "unknown")
    assert rc == 0 and "warning" in err
    data = read_table(d / "t.csv", missing_groups="unknown")
    assert data.lists[0]["groups"].tolist() == [0, 1, 0, -1]
    # an explicit -1 is a label (unknown on purpose): no error, no warning
    (d / "t2.csv").write_text(CSV.replace("q1,d,1,1,y", "q1,d,1,1,-1"))
    data = read_table(d / "t2.csv")
    assert data.lists[0]["groups"].tolist() == [0, 1, 0, -1] and not data.warnings


# ------------------------------------------------------------------------------------------------ duplicates
def test_duplicate_items(tmp_path):
    d = write(tmp_path, **{"t.csv": CSV + "q1,b,0.5,0,y\n", "run.txt": RUN + "q1 Q0 b 5 0.5 s\n"})
    with pytest.raises(ValueError, match=r"t\.csv:6: item 'b' appears twice in list 'q1' \(also at .*t\.csv:3\)"):
        read_table(d / "t.csv")
    with pytest.raises(ValueError, match=r"run\.txt:5: document 'b' appears twice for query 'q1' \(also at line 2\)"):
        read_trec(d / "run.txt")
    # the same item id in two lists is fine
    (d / "t2.csv").write_text(CSV + "q2,b,0.5,0,y\n")
    assert len(read_table(d / "t2.csv")) == 2


def test_conflicting_and_repeated_qrels_lines(tmp_path):
    d = write(tmp_path, **{"run.txt": RUN, "c.txt": QRELS + "q1 0 b 2\n", "r.txt": QRELS + "q1 0 b 0\n"})
    with pytest.raises(ValueError, match=r"c\.txt:5: document 'b' of query 'q1' is judged 2 here and 0 at line 2"):
        read_qrels(d / "c.txt")
    data = read_trec(d / "run.txt", d / "r.txt")
    assert data.lists[0]["relevance"].tolist() == [1, 0, 2, 1]
    assert any("1 repeated identical qrels lines" in n for n in data.notes)
    # the same judgment with another group: two groups
    (d / "g.txt").write_text("q1 0 a 1 x\nq1 0 a 1 y\nq1 0 b 0 y\nq1 0 c 2 x\nq1 0 d 1 y\n")
    g = read_trec(d / "run.txt", d / "g.txt").lists[0]["groups"]
    torch.testing.assert_close(g, torch.tensor([[.5, .5], [0, 1], [1, 0], [0, 1]], dtype=torch.float64))


def test_group_file_errors(tmp_path, capsys):
    d = write(tmp_path, **{"run.txt": RUN, "qrels.txt": QRELS, "empty.txt": "# only a comment\n\n",
                           "dup.txt": GROUPS + "a x\n", "bad.txt": "a x y z\n"})
    rc, _, err = cli(d, capsys, *trec_args(d, groups="empty.txt"))
    assert rc == 2 and re.search(r"empty\.txt: the group file holds no 'docid group' line", err)
    assert "needs group labels" not in err
    with pytest.raises(ValueError, match=r"dup\.txt:5: document 'a' has group 'x' twice \(also at .*dup\.txt:1\)"):
        read_trec(d / "run.txt", d / "qrels.txt", d / "dup.txt")
    with pytest.raises(ValueError, match=r"bad\.txt:1: a group file line is"):
        read_group_file(d / "bad.txt")


# ------------------------------------------------------------------------------------- grades and numbers
@pytest.mark.parametrize("kind", ["trec", "csv"])
def test_negative_grades_same_rule_for_trec_and_csv(tmp_path, capsys, kind):
    d = write(tmp_path, **{"run.txt": RUN, "qrels.txt": QRELS.replace("q1 0 b 0", "q1 0 b -2"),
                           "groups.txt": GROUPS, "t.csv": CSV.replace("q1,b,3,0,y", "q1,b,3,-2,y")})
    args = trec_args(d) if kind == "trec" else ["--table", str(d / "t.csv")]
    where = r"qrels\.txt:2" if kind == "trec" else r"t\.csv:3"
    rc, _, err = cli(d, capsys, *args, "--measures", "ndcg")
    assert rc == 2 and re.search(where + r": relevance must be >= 0; got '-2'", err)
    assert "--negative-grades zero" in err
    rc, out, err = cli(d, capsys, *args, "--measures", "ndcg", "--negative-grades", "zero")
    assert rc == 0 and re.search(r"warning: 1 negative relevance grades read as 0 \(first at \S*" + where, err)
    reader = (lambda: read_trec(d / "run.txt", d / "qrels.txt", d / "groups.txt", negative_grades="zero")) \
        if kind == "trec" else (lambda: read_table(d / "t.csv", negative_grades="zero"))
    assert reader().lists[0]["relevance"].tolist() == [1, 0, 2, 1]


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "x"])
def test_non_finite_numbers_name_file_and_line(tmp_path, bad):
    d = write(tmp_path, **{"run.txt": RUN.replace("q1 Q0 c 3 2 s", f"q1 Q0 c 3 {bad} s"),
                           "t.csv": CSV.replace("q1,c,2,2,x", f"q1,c,{bad},2,x"),
                           "q.txt": QRELS.replace("q1 0 d 1", f"q1 0 d {bad}")})
    with pytest.raises(ValueError, match=r"run\.txt:3: score must be a (finite )?number; got '" + bad):
        read_trec(d / "run.txt")
    with pytest.raises(ValueError, match=r"t\.csv:4: score must be a (finite )?number; got '" + bad):
        read_table(d / "t.csv")
    with pytest.raises(ValueError, match=r"q\.txt:4: relevance must be a (finite )?number; got '" + bad):
        read_qrels(d / "q.txt")


def test_non_integer_rank(tmp_path):
    d = write(tmp_path, **{"run.txt": RUN.replace("q1 Q0 b 2 3 s", "q1 Q0 b 2.5 3 s")})
    with pytest.raises(ValueError, match=r"run\.txt:2: rank must be an integer"):
        read_trec(d / "run.txt")


def test_empty_or_unrelated_qrels_are_errors(tmp_path, capsys):
    d = write(tmp_path, **{"run.txt": RUN, "empty.txt": "", "other.txt": "q9 0 a 1\n"})
    rc, _, err = cli(d, capsys, *trec_args(d, qrels="empty.txt", groups=None), "--measures", "ndcg")
    assert rc == 2 and re.search(r"empty\.txt: the qrels file holds no judgment", err)
    rc, _, err = cli(d, capsys, *trec_args(d, qrels="other.txt", groups=None), "--measures", "ndcg")
    assert rc == 2 and re.search(r"other\.txt: none of the 1 queries of the run .* is in the qrels", err)


# ------------------------------------------------------------------------------------- where errors point
def test_missing_file_names_its_option(tmp_path, capsys):
    d = write(tmp_path, **{"run.txt": RUN, "qrels.txt": QRELS})
    for opt, args in (("--qrels", ["--run", str(d / "run.txt"), "--qrels", str(d / "nope.txt")]),
                      ("--run", ["--run", str(d / "nope.txt")]),
                      ("--groups", trec_args(d, groups="nope.txt")),
                      ("--table", ["--table", str(d / "nope.csv")])):
        rc, _, err = cli(d, capsys, *args)
        assert rc == 2 and f"{opt}: no such file: " in err and "nope" in err, err
    rc, _, err = cli(d, capsys, "--run", str(d))
    assert rc == 2 and "--run: not a file" in err
    rc, _, err = cli(d, capsys, "--qrels", str(d / "qrels.txt"))
    assert rc == 2 and "need a --run" in err


# ---------------------------------------------------------------------------------- shares, unknown groups
def test_group_shares_partly_unknown(tmp_path):
    d = write(tmp_path, **{"run.txt": RUN, "qrels.txt": QRELS,
                           "groups.txt": "a x=0.7\nb y\nc x=0.5\nc y=0.25\nd -1\n"})
    g = read_trec(d / "run.txt", d / "qrels.txt", d / "groups.txt").lists[0]["groups"]
    # a: 0.7 known (x), 0.3 unknown; b: y; c: half x, a quarter y, a quarter unknown; d: unknown
    torch.testing.assert_close(g, torch.tensor([[.7, 0], [0, 1], [.5, .25], [0, 0]], dtype=torch.float64))
    # plain labels with -1 split equally, the -1 part being unknown
    (d / "g2.txt").write_text("a x\na -1\nb y\nc x\nd y\n")
    g2 = read_trec(d / "run.txt", None, d / "g2.txt").lists[0]["groups"]
    torch.testing.assert_close(g2[0], torch.tensor([.5, 0], dtype=torch.float64))
    for text, msg in (("a x=0.7\na y=0.5\nb y\nc x\nd y\n", r"g3\.txt:2: the group shares of document 'a' sum to 1\.2"),
                      ("a x=0.7\na y\nb y\nc x\nd y\n", r"g3\.txt:2: document 'a' mixes labels with shares"),
                      ("a x=1.5\n", r"g3\.txt:1: a group share must be a number in \[0, 1\]")):
        (d / "g3.txt").write_text(text)
        with pytest.raises(ValueError, match=msg):
            read_trec(d / "run.txt", None, d / "g3.txt")


def test_table_group_cells_match_group_file(tmp_path):
    # the same lists written as TREC files and as a table give the same tensors
    d = write(tmp_path, **{"run.txt": RUN, "qrels.txt": QRELS, "groups.txt": "a x=0.7\nb y\nc x\nc y\nd -1\n",
                           "t.csv": "qid,docid,score,rel,group\nq1,a,4,1,x=0.7\nq1,b,3,0,y\nq1,c,2,2,x|y\n"
                                    "q1,d,1,1,-1\n"})
    a = read_trec(d / "run.txt", d / "qrels.txt", d / "groups.txt").lists[0]
    b = read_table(d / "t.csv").lists[0]
    for k in ("scores", "relevance", "groups"):
        torch.testing.assert_close(a[k], b[k])
    assert a["item_ids"] == b["item_ids"]


def test_partly_unknown_groups_reach_the_measures(tmp_path, capsys):
    # the soft path used to raise "rows must sum to 1"; now AWRF sees 0.7 of page a in x and 0.3 in no group
    d = write(tmp_path, **{"run.txt": RUN, "qrels.txt": QRELS, "groups.txt": "a x=0.7\nb y\nc x=0.5\nc y=0.5\nd y\n"})
    rc, out, err = cli(d, capsys, *trec_args(d), "--measures", "awrf:browsing=uniform")
    assert rc == 0, err
    vals = _columns(json.loads(out))
    # by hand: uniform exposure 1 per position; x = 0.7 + 0.5 = 1.2, y = 1 + 0.5 + 1 = 2.5, known total 3.7;
    # AWRF_nd against the equal target 1/2
    assert vals["awrf_A"] == pytest.approx(abs(1.2 / 3.7 - 0.5))
    assert vals["awrf_B"] == pytest.approx(abs(2.5 / 3.7 - 0.5))
    direct = ex.awrf(torch.tensor([4., 3., 2., 1.]), torch.tensor([[.7, 0], [0, 1], [.5, .5], [0, 1]]),
                     browsing="uniform")
    assert float(direct[0]) == pytest.approx(vals["awrf_A"])


def _columns(table_json):
    """First list's value of every column in the JSON the CLI prints."""
    return dict(zip(table_json["columns"], table_json["lists"][0]["values"]))


def test_expeval_iter_layout_separators(tmp_path):
    # expeval's reader splits the group field on '|' (its help shows ','); a 3-column line has no group (-1)
    d = write(tmp_path, **{"run.txt": RUN, "q.txt": "q1 0|1 a 1\nq1 1 b 0\nq1 0,1 c 2\nq1 d 1\n"})
    g = read_trec(d / "run.txt", d / "q.txt", qrels_groups="iter").lists[0]["groups"]
    torch.testing.assert_close(g, torch.tensor([[.5, .5], [0, 1], [.5, .5], [0, 0]], dtype=torch.float64))


# ---------------------------------------------------------------------------------------- --list-measures
def test_list_measures_prints_full_descriptions(capsys):
    from torchfair.evaluation.registry import available_measures, get_measure
    assert main(["metrics", "--list-measures"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= 120
    # every measure starts an entry; joining its wrapped lines gives its whole description back
    entries, cur = {}, None
    for line in lines:
        if not line.startswith(" "):
            cur, rest = line.split(None, 1) if " " in line.strip() else (line.strip(), "")
            entries[cur] = [rest.strip()]
        else:
            entries[cur].append(line.strip())
    assert list(entries) == list(available_measures())
    for name, parts in entries.items():
        want = " ".join(get_measure(name).description.split()) or "(no description)"
        assert " ".join(p for p in parts if p) == want


def test_parser_reads_the_readers_options():
    assert build_parser("metrics").parse_args(["--missing_groups", "unknown"]).missing_groups == "unknown"


@pytest.mark.parametrize("kind", ["trec", "csv"])
def test_no_relevance_same_rule_for_trec_and_csv(tmp_path, capsys, kind):
    # a run without qrels used to score every list as having no relevant item (all NDCG invalid, exit 0);
    # a table without a relevance column was an error: both are now the same error, naming the missing input
    d = write(tmp_path, **{"run.txt": RUN, "groups.txt": GROUPS,
                           "t.csv": "qid,docid,score,group\nq1,a,4,x\nq1,b,3,y\n"})
    args = ["--run", str(d / "run.txt"), "--groups", str(d / "groups.txt")] if kind == "trec" else \
        ["--table", str(d / "t.csv")]
    rc, _, err = cli(d, capsys, *args, "--measures", "ndcg")
    assert rc == 2 and "measure 'ndcg' needs relevance: give --qrels with --run, or a 'relevance' column" in err
    rc, out, err = cli(d, capsys, *args, "--measures", "rnd")  # relevance-free measures still run
    assert rc == 0, err
    data = read_trec(d / "run.txt", None, d / "groups.txt") if kind == "trec" else read_table(d / "t.csv")
    assert all(x["relevance"] is None for x in data.lists)
