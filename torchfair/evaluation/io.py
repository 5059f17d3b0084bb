"""Reading ranked lists from files: TREC run + qrels (+ group file), or a CSV / Parquet table.

Every problem in a file is a ``ValueError`` naming the file and line (``run.txt:12: ...``).  Two kinds of input
that a user may mean are accepted on request, with a warning (:attr:`RankedLists.warnings`):
``missing_groups="unknown"`` (a document without a group label is of unknown group, id ``-1``) and
``negative_grades="zero"`` (a negative relevance grade, used by some collections for junk, reads as 0).

TREC input
----------
* **run** (``trec_eval`` format): ``qid Q0 docid rank score tag``, whitespace separated.  Items are ordered by
  ``score`` (descending).  ``read_trec(ties=...)`` says what happens to equal scores: ``"score"`` (default) keeps
  the scores, the items of equal score in the order of the ``rank`` column, and leaves the ties to the measures
  (broken by that order under their default ``Hard(ties="first")``, or averaged over with ``ties="average"``);
  ``"docno"`` is **trec_eval's order** (score descending, then document id descending, as ``strcmp``): the items
  come in that order and their ``scores`` are replaced by the strictly decreasing ``n, n - 1, ..., 1``, so every
  measure sees exactly trec_eval's ranking, without ties; the run's scores are kept under ``"raw_scores"``.
  ``use_rank=True`` ranks by the rank column instead (trec_eval ignores it).  A document listed twice for a query,
  a non-integer rank or a score that is not a finite number is an error.
* **qrels**: ``qid 0 docid rel`` (4 columns), or ``qid 0 docid rel group`` (5 columns, the group label as last
  column).  With ``qrels_groups="iter"`` the second column holds the group ids instead of the unused iteration
  field, separated by ``|`` (what expeval's reader splits on) or ``,`` (what its help text shows) when a document
  belongs to several groups: the ``QID GID DID REL`` layout of the expected-exposure evaluator ``expeval`` (Diaz
  et al., CIKM 2020; its ``-G`` option).  A 3-column line ``qid docid rel`` has no group (expeval gives it group
  ``-1``).  A first line that is not a judgment (a header) is skipped.  An empty qrels file, a document judged twice
  with different grades, and a negative grade (unless ``negative_grades="zero"``) are errors; a line repeated
  identically is read once (``repeated_qrels="once"``) or is an error (``"error"``, trec_eval's: under ``--trec``).
* **group file** (optional, as in the TREC Fair Ranking track, e.g. document -> author group): ``docid group``
  (one group for the document everywhere) or ``qid docid group`` (per query).  Lines starting with ``#`` are
  comments.  A group file wins over groups found in the qrels.  An empty group file is an error.

Group labels (group file, 5th qrels column, table ``group`` cell)
----------------------------------------------------------------
* ``news``: the document is in group ``news``.  A document listed with several labels (several lines of a group
  file, or ``news|blog`` in one field) is split equally among them (soft membership ``[n, G]``).
* ``news=0.7``: an explicit share.  Shares of one document must sum to at most 1; the rest is **unknown**.  This is
  how pages whose group is only partly known are written (TREC Fair 2022's fairness attributes with an unknown
  part, see :mod:`torchfair.compat.trec_fair`): ``d1 Europe=0.7`` puts 0.7 of d1 in ``Europe`` and 0.3 in no group.
  Shares and plain labels cannot be mixed for one document.
* ``-1``: unknown group, explicitly (also with a share, ``-1=0.3``, next to known labels without shares).  An item
  of unknown group is ranked (it takes a position and exposure) but belongs to no group (Raj & Ekstrand,
  SIGIR 2022, §2.6).
* A ranked document **without any label** while the input has group labels is an error naming the file and line
  of the document (it would silently become "unknown" and can flip the sign of a group comparison);
  ``missing_groups="unknown"`` reads it as ``-1`` with a warning.

If every known label is an integer they are used as ids; otherwise the distinct labels are sorted and numbered
``0, 1, ...``; :attr:`RankedLists.group_names` gives the name of each id (columns call id 0 ``A``, id 1 ``B``...).

Other rules: without qrels the lists have no relevance (``None``, as a table without a relevance column); a
run item absent from the qrels has relevance 0 (unjudged = non-relevant, as ``trec_eval``; a note
counts them); qrels entries absent from the run are not ranked, but (``ideal="qrels"``, the default) every list
carries ``"ideal_relevance"``, the grades of *every* judged document of its query (1-D float64, in qrels order,
negative grades as ``negative_grades`` says), which :func:`~torchfair.evaluation.evaluate_lists` passes to the
measures: NDCG's ideal ranking, the number of relevant documents of recall, AP and R-precision, and RR's
definedness then come from all judged documents, trec_eval's convention (``ideal="run"``: no such key, the
measures see the run's documents only).  A query of the run without any qrels entry is kept with relevance 0
everywhere (a note names it) under ``queries="run"`` (default), and left out under ``queries="qrels"`` (trec_eval's
query set: the run's queries that are in the qrels); a run none of whose queries is in the qrels is an error
(mismatched files).  A qrels line repeating a judgment with another group label adds that group to the document
(several groups, as several lines of a group file do).

trec_eval's numbers (Voorhees & Harman, TREC, 2005; checked per query against pytrec_eval)::

    from torchfair.evaluation import TREC_EVAL, TREC_READ, evaluate_lists, read_trec
    data = read_trec("run.txt", "qrels.txt", **TREC_READ)   # ties="docno", queries="qrels", negative grades 0
    table = evaluate_lists(data.lists, ["map", "P_10", "ndcg_cut_10", "recip_rank"], **TREC_EVAL)
    print(table)   # means over trec_eval's queries, a query without relevant document counting 0

Table input
-----------
A CSV (header required) or Parquet file with one row per item and the columns ``list_id``, ``item_id`` (optional),
``score``, ``relevance`` (optional; an empty cell is 0, with a note) and ``group`` (optional; labels as above, an
empty cell is a missing label).  Accepted aliases: ``qid``/``query_id``/``query`` for ``list_id``;
``docid``/``doc_id``/``item`` for ``item_id``; ``rel``/``label``/``y`` for ``relevance``; ``groups``/``group_id``
for ``group``.  Items keep the row order within their list (so equal scores are ranked in row order under
``ties="first"``).  The same checks as for TREC input apply (finite scores, duplicate item ids within a list,
negative relevance, missing group labels).  Parquet needs pandas with pyarrow or fastparquet.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch

__all__ = ["RankedLists", "read_trec", "read_run", "read_qrels", "read_group_file", "read_table",
           "MISSING_GROUPS", "NEGATIVE_GRADES", "UNKNOWN_LABEL", "TIES", "QUERIES", "IDEAL", "TREC_READ",
           "REPEATED_QRELS"]

#: choices of ``missing_groups``: a document without a group label is an error, or of unknown group (warning)
MISSING_GROUPS = ("error", "unknown")
#: choices of ``negative_grades``: a negative relevance grade is an error, or read as 0 (warning)
NEGATIVE_GRADES = ("error", "zero")
#: the group label meaning "unknown group" in every input
UNKNOWN_LABEL = "-1"
#: choices of ``read_trec(ties=...)``: scores kept, equal ones in rank-column order (``"score"``), or trec_eval's
#: order, score then document id descending, with strictly decreasing scores (``"docno"``)
TIES = ("score", "docno")
#: choices of ``read_trec(repeated_qrels=...)``: a qrels line repeated identically read once, or an error (trec_eval)
REPEATED_QRELS = ("once", "error")
#: choices of ``read_trec(queries=...)``: every query of the run, or only those in the qrels (trec_eval's)
QUERIES = ("run", "qrels")
#: choices of ``read_trec(ideal=...)``: lists carry ``ideal_relevance`` from the qrels, or not
IDEAL = ("qrels", "run")
#: the :func:`read_trec` options of trec_eval's conventions (with :data:`torchfair.evaluation.TREC_EVAL` for the
#: measures): its ranking order, its query set, negative grades read as 0 (trec_eval: gain 0, not relevant)
TREC_READ = {"ties": "docno", "queries": "qrels", "negative_grades": "zero", "ideal": "qrels", "repeated_qrels": "error"}
_SHARE_TOL = 1e-6


@dataclass
class RankedLists:
    """Lists ready for :func:`~torchfair.evaluation.table.evaluate_lists`: dicts with ``list_id``, ``item_ids``,
    ``scores``, ``relevance``, (when known) ``groups``, and from :func:`read_trec` with qrels ``ideal_relevance``
    (every judged grade of the query) and, with ``ties="docno"``, ``raw_scores``; ``group_names[g]`` names group
    id g.  ``notes`` are remarks on ordinary input (unjudged items); ``warnings`` report input read leniently on
    request."""

    lists: List[dict]
    group_names: Optional[List[str]] = None
    has_groups: bool = False
    notes: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lists)


# ------------------------------------------------------------------------------------------------ helpers
def _check_choice(value, name: str, choices) -> None:
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {', '.join(repr(c) for c in choices)}; got {value!r}")


def _lines(path) -> Iterable[Tuple[int, List[str]]]:
    with open(path) as f:
        for no, line in enumerate(f, 1):
            s = line.strip()
            if s and not s.startswith("#"):
                yield no, s.split()


def _float(x: str, where: str, what: str) -> float:
    try:
        v = float(x)
    except ValueError:
        raise ValueError(f"{where}: {what} must be a number; got {x!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{where}: {what} must be a finite number; got {x!r}")
    return v


def _grade(x: str, where: str, negative_grades: str, clamped: List[str]) -> float:
    """A relevance grade: finite, and non-negative unless ``negative_grades='zero'`` (then 0, remembered)."""
    v = _float(x, where, "relevance")
    if v < 0:
        if negative_grades == "error":
            raise ValueError(f"{where}: relevance must be >= 0; got {x!r} (some collections mark junk with "
                             f"negative grades: pass --negative-grades zero / negative_grades='zero' to read "
                             f"them as 0)")
        clamped.append(where)
        v = 0.0
    return v


#: one label of a document: (label, share or None, where it was read)
_Part = Tuple[str, Optional[float], str]


def _parse_labels(text: str, where: str, seps: str = "|") -> List[_Part]:
    """``"news"``, ``"news=0.7"``, ``"news|blog"`` (``seps`` separate several labels) -> parts."""
    for s in seps[1:]:
        text = text.replace(s, seps[0])
    out: List[_Part] = []
    for tok in text.split(seps[0]):
        tok = tok.strip()
        if not tok:
            raise ValueError(f"{where}: empty group label in {text!r}")
        share = None
        if "=" in tok:
            lab, _, sh = tok.rpartition("=")
            try:
                share = float(sh)
            except ValueError:
                lab, share = tok, None  # '=' belongs to the label
            else:
                if not lab or not math.isfinite(share) or not 0 <= share <= 1:
                    raise ValueError(f"{where}: a group share must be a number in [0, 1] after 'label='; "
                                     f"got {tok!r}")
                tok = lab
        out.append((tok, share, where))
    return out


def _combine(parts: List[_Part], doc: str) -> Dict[str, float]:
    """Shares of one document's labels: plain labels split equally, explicit shares as given (sum <= 1).
    The unknown label ``-1`` keeps its share (mass in no group)."""
    seen: Dict[str, str] = {}
    for lab, _, where in parts:
        if lab in seen:
            raise ValueError(f"{where}: document {doc!r} has group {lab!r} twice (also at {seen[lab]})")
        seen[lab] = where
    given = [p for p in parts if p[1] is not None]
    if given and len(given) != len(parts):
        plain = next(p for p in parts if p[1] is None)
        raise ValueError(f"{plain[2]}: document {doc!r} mixes labels with shares ({given[0][0]}={given[0][1]:g}, "
                         f"at {given[0][2]}) and without ({plain[0]!r}): give every label a share, or none")
    if not given:
        return {lab: 1.0 / len(parts) for lab, _, _ in parts}
    total = sum(p[1] for p in given)
    if total > 1 + _SHARE_TOL:
        raise ValueError(f"{parts[-1][2]}: the group shares of document {doc!r} sum to {total:g} > 1")
    return {lab: float(sh) for lab, sh, _ in given}


def _group_ids(labels: Dict[str, str]) -> Tuple[Dict[str, int], List[str]]:
    """``labels``: known label -> where first seen.  Integer labels are ids; others are numbered in sorted order."""
    uniq = sorted(labels)
    try:
        ints = {u: int(u) for u in uniq}
    except ValueError:
        ints = None
    if ints is not None:
        bad = [u for u, v in ints.items() if v < 0]
        if bad:
            raise ValueError(f"{labels[bad[0]]}: integer group ids must be >= 0 (or -1 for unknown); got {bad[0]!r}")
        G = max(ints.values()) + 1
        return ints, [str(g) for g in range(G)]
    return {u: i for i, u in enumerate(uniq)}, uniq


#: one ranked item while reading: (docid, score, relevance, group parts or None, where the item was read)
_Item = Tuple[str, float, float, Optional[List[_Part]], str]


def _build(items: Dict[str, List[_Item]], notes: List[str], warnings: List[str], *, group_source: Optional[str],
           missing_groups: str) -> RankedLists:
    """``items``: qid -> items in ranking/tie order.  ``group_source`` names where group labels come from (None:
    the input has none)."""
    shares: Dict[Tuple[str, int], Optional[Dict[str, float]]] = {}
    known: Dict[str, str] = {}
    missing: List[Tuple[str, str, str]] = []
    for qid, lst in items.items():
        for i, (doc, _, _, parts, where) in enumerate(lst):
            if parts is None:
                shares[qid, i] = None
                if group_source is not None:
                    missing.append((where, qid, doc))
                continue
            sh = _combine(parts, doc)
            shares[qid, i] = sh
            for lab, _, w in parts:
                if lab != UNKNOWN_LABEL:
                    known.setdefault(lab, w)
    if group_source is not None:
        if missing:
            where, qid, doc = missing[0]
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            if missing_groups == "error":
                raise ValueError(f"{where}: document {doc!r} of query {qid!r} has no group label in "
                                 f"{group_source}{more}; label it (-1 = unknown group) or pass --missing-groups "
                                 f"unknown / missing_groups='unknown' to read unlabelled documents as unknown")
            warnings.append(f"{len(missing)} ranked documents have no group label in {group_source} (first: "
                            f"{doc!r} of query {qid!r} at {where}): read as unknown group (-1)")
        if not known:
            raise ValueError(f"{group_source}: no ranked document has a known group label")
    ids, names = _group_ids(known) if known else ({}, None)
    G = len(names) if names is not None else 0
    soft = any(sh is not None and not (len(sh) == 1 and next(iter(sh.values())) == 1.0) for sh in shares.values())
    out = []
    for qid, lst in items.items():
        d = {"list_id": qid, "item_ids": [x[0] for x in lst],
             "scores": torch.tensor([x[1] for x in lst], dtype=torch.float64),
             "relevance": torch.tensor([x[2] for x in lst], dtype=torch.float64)}
        if group_source is not None:
            if soft:
                m = torch.zeros(len(lst), max(G, 1), dtype=torch.float64)
                for i in range(len(lst)):
                    for lab, s in (shares[qid, i] or {}).items():
                        if lab != UNKNOWN_LABEL:
                            m[i, ids[lab]] += s
                d["groups"] = m
            else:
                d["groups"] = torch.tensor([ids.get(next(iter(shares[qid, i])), -1) if shares[qid, i] else -1
                                            for i in range(len(lst))], dtype=torch.long)
        out.append(d)
    return RankedLists(out, names, group_source is not None, notes, warnings)


# ------------------------------------------------------------------------------------------------- readers
def _read_run(path, use_rank: bool) -> Dict[str, List[Tuple[str, int, float, str]]]:
    out: Dict[str, List[Tuple[str, int, float, str]]] = {}
    seen: Dict[Tuple[str, str], int] = {}
    for no, f in _lines(path):
        where = f"{path}:{no}"
        if len(f) not in (5, 6):
            raise ValueError(f"{where}: a TREC run line is 'qid Q0 docid rank score tag'; got {len(f)} fields")
        qid, _, doc, rank, score = f[:5]
        r = _float(rank, where, "rank")
        if not r.is_integer():
            raise ValueError(f"{where}: rank must be an integer; got {rank!r}")
        s = _float(score, where, "score")
        if (qid, doc) in seen:
            raise ValueError(f"{where}: document {doc!r} appears twice for query {qid!r} (also at line "
                             f"{seen[qid, doc]})")
        seen[qid, doc] = no
        out.setdefault(qid, []).append((doc, int(r), -r if use_rank else s, where))
    if not out:
        raise ValueError(f"{path}: the run file holds no ranking")
    return out


def read_run(path, use_rank: bool = False) -> Dict[str, List[Tuple[str, int, float]]]:
    """``{qid: [(docid, rank, score), ...]}`` from a TREC run file (6 columns; a missing tag is tolerated).
    With ``use_rank`` the score is minus the rank.  Errors name the file and line."""
    return {q: [x[:3] for x in lst] for q, lst in _read_run(path, use_rank).items()}


def _read_qrels(path, groups: str, negative_grades: str, clamped: List[str], repeated: str = "once"):
    _check_choice(groups, "groups", ("auto", "column", "iter", "none"))
    _check_choice(negative_grades, "negative_grades", NEGATIVE_GRADES)
    rels: Dict[str, Dict[str, float]] = {}
    grp: Dict[Tuple[str, str], List[_Part]] = {}
    first_at: Dict[Tuple[str, str], Tuple[int, float, set]] = {}
    first = True
    repeats = 0
    for no, f in _lines(path):
        where = f"{path}:{no}"
        if len(f) == 3:  # qid docid rel (expeval also reads this; it gives such a line group -1)
            f = [f[0], UNKNOWN_LABEL if groups == "iter" else "0", f[1], f[2]]
        if len(f) not in (4, 5):
            raise ValueError(f"{where}: a qrels line is 'qid 0 docid rel' or 'qid 0 docid rel group'; "
                             f"got {len(f)} fields")
        try:
            float(f[3])
        except ValueError:
            if first:  # a header line
                first = False
                continue
        first = False
        qid, it, doc = f[0], f[1], f[2]
        rel = _grade(f[3], where, negative_grades, clamped)
        label = None
        if groups == "iter":
            label = it
        elif groups in ("auto", "column"):
            if len(f) == 5:
                label = f[4]
            elif groups == "column":
                raise ValueError(f"{where}: groups='column' (--qrels-groups column) needs a 5th (group) column")
        key = (qid, doc)
        if key in first_at:
            pno, prel, plabels = first_at[key]
            if prel != rel:
                raise ValueError(f"{where}: document {doc!r} of query {qid!r} is judged {f[3]} here and "
                                 f"{prel:g} at line {pno}: conflicting judgments")
            if label is None or label in plabels:
                if repeated == "error":
                    raise ValueError(f"{where}: document {doc!r} of query {qid!r} is judged again (first at line "
                                     f"{pno}); trec_eval refuses a repeated qrels line (`repeated_qrels`='error', "
                                     f"as under --trec): remove the repeat, or read with repeated_qrels='once'")
                repeats += 1
                continue
            # the same judgment with another group label: the document is in several groups
            plabels.add(label)
            grp.setdefault(key, []).extend(_parse_labels(label, where, ",|" if groups == "iter" else "|"))
            continue
        first_at[key] = (no, rel, {label} if label is not None else set())
        rels.setdefault(qid, {})[doc] = rel
        if label is not None:
            grp[key] = _parse_labels(label, where, ",|" if groups == "iter" else "|")
    if not rels:
        raise ValueError(f"{path}: the qrels file holds no judgment")
    return rels, grp, repeats


def read_qrels(path, groups: str = "auto", *, negative_grades: str = "error"
               ) -> Tuple[Dict[str, Dict[str, float]], Dict[Tuple[str, str], List[str]]]:
    """``({qid: {docid: rel}}, {(qid, docid): [group labels]})`` from a qrels file.

    ``groups``: ``"auto"`` (a 5th column, when present, is the group), ``"column"`` (5 columns required),
    ``"iter"`` (expeval's layout: groups in the 2nd column, ``|`` or ``,`` separated), ``"none"``.
    ``negative_grades``: ``"error"`` (default) or ``"zero"``.  Labels are returned without their shares."""
    rels, grp, _ = _read_qrels(path, groups, negative_grades, [])
    return rels, {k: [lab for lab, _, _ in v] for k, v in grp.items()}


def _read_group_file(path):
    by_doc: Dict[str, List[_Part]] = {}
    by_pair: Dict[Tuple[str, str], List[_Part]] = {}
    any_line = False
    for no, f in _lines(path):
        where = f"{path}:{no}"
        any_line = True
        if len(f) == 2:
            by_doc.setdefault(f[0], []).extend(_parse_labels(f[1], where))
        elif len(f) == 3:
            by_pair.setdefault((f[0], f[1]), []).extend(_parse_labels(f[2], where))
        else:
            raise ValueError(f"{where}: a group file line is 'docid group' or 'qid docid group'; "
                             f"got {len(f)} fields")
    if not any_line:
        raise ValueError(f"{path}: the group file holds no 'docid group' line (it is empty or all comments)")
    return by_doc, by_pair


def read_group_file(path) -> Tuple[Dict[str, List[str]], Dict[Tuple[str, str], List[str]]]:
    """``({docid: [labels]}, {(qid, docid): [labels]})`` from ``docid group`` / ``qid docid group`` lines.
    A document listed on several lines belongs to several groups.  Labels are returned without their shares."""
    by_doc, by_pair = _read_group_file(path)
    return ({k: [p[0] for p in v] for k, v in by_doc.items()}, {k: [p[0] for p in v] for k, v in by_pair.items()})


def read_trec(run, qrels=None, groups=None, *, qrels_groups: str = "auto", use_rank: bool = False,
              missing_groups: str = "error", negative_grades: str = "error", ties: str = "score",
              queries: str = "run", ideal: str = "qrels", repeated_qrels: str = "once") -> RankedLists:
    """Read a TREC run with its qrels and optional group file (see the module doc for the formats and checks).

    ``missing_groups``: ``"error"`` (default: a ranked document without a group label, while the input has group
    labels, is an error naming its run line) or ``"unknown"`` (read as group ``-1``, with a warning).
    ``negative_grades``: ``"error"`` (default) or ``"zero"`` (read as 0, with a warning).
    ``ties``: ``"score"`` (default: scores kept, equal ones in rank-column order, ties left to the measures'
    ``ordering``) or ``"docno"`` (**trec_eval's order**: score descending, then document id descending; scores
    replaced by ``n, ..., 1`` so that no measure sees a tie, the run's kept as ``"raw_scores"``).  trec_eval stores a
    run's scores as C ``float``: under ``"docno"`` scores are compared rounded to float32, so two scores that differ
    below float32 resolution tie there and go by document id, as in trec_eval.
    ``queries``: ``"run"`` (default: every query of the run, one without qrels entry with relevance 0) or
    ``"qrels"`` (trec_eval's query set without ``-c``: the run's queries that have a qrels entry; needs qrels).
    ``ideal``: ``"qrels"`` (default, with qrels: every list carries ``"ideal_relevance"``, the grades of all judged
    documents of its query, trec_eval's ideal ranking and relevant counts) or ``"run"`` (no ``ideal_relevance``).
    ``repeated_qrels``: ``"once"`` (default: a qrels line repeated identically is read once, with a note) or
    ``"error"`` (trec_eval's: a ``ValueError`` naming both lines).

    The defaults keep the run's own scores and every query (nothing dropped or rewritten silently, and
    ``Hard(ties="average")`` stays available); :data:`TREC_READ` is trec_eval's choice of each.

    Example::

        data = read_trec("run.txt", "qrels.txt", **TREC_READ)   # as trec_eval reads them
        data.lists[0]["ideal_relevance"]                         # every judged grade of the first query
    """
    _check_choice(missing_groups, "missing_groups", MISSING_GROUPS)
    _check_choice(negative_grades, "negative_grades", NEGATIVE_GRADES)
    _check_choice(ties, "ties", TIES)
    _check_choice(queries, "queries", QUERIES)
    _check_choice(ideal, "ideal", IDEAL)
    _check_choice(repeated_qrels, "repeated_qrels", REPEATED_QRELS)
    if queries == "qrels" and qrels is None:
        raise ValueError("`queries`='qrels' keeps the run's queries that are in the qrels: it needs `qrels`")
    ranking = _read_run(run, use_rank)
    clamped: List[str] = []
    notes: List[str] = []
    warnings: List[str] = []
    rels: Dict[str, Dict[str, float]] = {}
    qgrp: Dict[Tuple[str, str], List[_Part]] = {}
    if qrels is not None:
        rels, qgrp, repeats = _read_qrels(qrels, qrels_groups, negative_grades, clamped, repeated_qrels)
        if repeats:
            notes.append(f"{qrels}: {repeats} repeated identical qrels lines read once")
        if not any(q in rels for q in ranking):
            raise ValueError(f"{qrels}: none of the {len(ranking)} queries of the run {run} is in the qrels "
                             f"(first run query: {next(iter(ranking))!r}); are these the right files?")
    by_doc: Dict[str, List[_Part]] = {}
    by_pair: Dict[Tuple[str, str], List[_Part]] = {}
    if groups is not None:
        by_doc, by_pair = _read_group_file(groups)
        source: Optional[str] = str(groups)
    elif qgrp:
        source = f"the group column of {qrels}"
    else:
        source = None
    items: Dict[str, List[_Item]] = {}
    unjudged = 0
    dropped = []
    for qid, lst in ranking.items():
        if queries == "qrels" and qid not in rels:
            dropped.append(qid)
            continue
        if ties == "docno":  # trec_eval: float32 score descending, then docno descending (strcmp); no two keys equal
            f32 = np.asarray([x[2] for x in lst], dtype=np.float64).astype(np.float32).tolist()
            lst = [x for _, x in sorted(zip(f32, lst), key=lambda p: (p[0], p[1][0]), reverse=True)]
        else:  # descending score, then the rank column (stable)
            lst = sorted(lst, key=lambda x: (-x[2], x[1]))
        q = rels.get(qid, {})
        if qrels is not None and qid not in rels:
            notes.append(f"query {qid} has no qrels entry: all its items have relevance 0")
        row = []
        for doc, _, score, where in lst:
            if doc not in q:
                unjudged += 1
            if groups is not None:
                g = by_pair.get((qid, doc)) or by_doc.get(doc)
            else:
                g = qgrp.get((qid, doc))
            row.append((doc, score, q.get(doc, 0.0), g, where))
        items[qid] = row
    if dropped:
        notes.append(f"{len(dropped)} run queries have no qrels entry and are left out (queries='qrels'; first: "
                     f"{dropped[0]!r})")
    if qrels is not None and unjudged:
        notes.append(f"{unjudged} run items are not in the qrels: relevance 0")
    if clamped:
        warnings.append(f"{len(clamped)} negative relevance grades read as 0 (first at {clamped[0]})")
    lists = _build(items, notes, warnings, group_source=source, missing_groups=missing_groups)
    for d in lists.lists:
        if ties == "docno":  # trec_eval's order, strict: every measure sees exactly it
            d["raw_scores"] = d["scores"]
            d["scores"] = torch.arange(len(d["item_ids"]), 0, -1, dtype=torch.float64)
        if qrels is not None and ideal == "qrels":
            d["ideal_relevance"] = torch.tensor(list(rels.get(d["list_id"], {}).values()), dtype=torch.float64)
    if qrels is None:  # no judgments: no relevance (as a table without a relevance column)
        for d in lists.lists:
            d["relevance"] = None
    return lists


_ALIASES = {"list_id": ("list_id", "qid", "query_id", "query"), "item_id": ("item_id", "docid", "doc_id", "item"),
            "score": ("score", "scores"), "relevance": ("relevance", "rel", "label", "y"),
            "group": ("group", "groups", "group_id")}


def _resolve_columns(header: Sequence[str], path) -> Dict[str, Optional[str]]:
    low = {h.strip().lower(): h for h in header}
    out = {}
    for key, names in _ALIASES.items():
        out[key] = next((low[n] for n in names if n in low), None)
    for req in ("list_id", "score"):
        if out[req] is None:
            raise ValueError(f"{path}: no {req!r} column (accepted names: {', '.join(_ALIASES[req])}); "
                             f"header is {list(header)}")
    return out


def _table_rows(path, fmt: str):
    """``(header, [(where, row dict)])``."""
    if fmt == "parquet":
        try:
            import pandas as pd
            df = pd.read_parquet(path)
        except ImportError as e:
            raise ImportError(f"reading Parquet ({path}) needs pandas with pyarrow or fastparquet "
                              f"(pip install 'torchfair[parquet]'); or convert the file to CSV") from e
        header = [str(c) for c in df.columns]
        rows = [(f"{path} row {i + 1}",
                 dict(zip(header, ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in r])))
                for i, r in enumerate(df.itertuples(index=False, name=None))]
        return header, rows
    with open(path, newline="") as f:
        sample = f.read(4096)
        f.seek(0)
        try:
            dialect = csv.Sniffer().sniff(sample, delimiters=",\t;")
        except csv.Error:
            dialect = csv.excel
        rd = csv.DictReader(f, dialect=dialect)
        header = rd.fieldnames or []
        rows = []
        for r in rd:
            rows.append((f"{path}:{rd.line_num}", r))
    return header, rows


def read_table(path, fmt: Optional[str] = None, *, missing_groups: str = "error",
               negative_grades: str = "error") -> RankedLists:
    """Read a CSV or Parquet table of items (see the module doc); ``fmt`` is ``"csv"``/``"parquet"`` (default:
    from the file extension, ``.parquet``/``.pq`` being Parquet, anything else CSV).  ``missing_groups`` and
    ``negative_grades`` as in :func:`read_trec` (an empty ``group`` cell is a missing label)."""
    fmt = fmt or ("parquet" if str(path).lower().endswith((".parquet", ".pq")) else "csv")
    _check_choice(fmt, "fmt", ("csv", "parquet"))
    _check_choice(missing_groups, "missing_groups", MISSING_GROUPS)
    _check_choice(negative_grades, "negative_grades", NEGATIVE_GRADES)
    header, rows = _table_rows(path, fmt)
    cols = _resolve_columns(header, path)
    items: Dict[str, List[_Item]] = {}
    first_line: Dict[Tuple[str, str], str] = {}
    clamped: List[str] = []
    empty_rel = 0
    for where, r in rows:
        lid = str(r[cols["list_id"]] or "").strip()
        if not lid:
            raise ValueError(f"{where}: empty list id ({cols['list_id']!r} column)")
        iid = str(r[cols["item_id"]] or "").strip() if cols["item_id"] else str(len(items.get(lid, [])))
        if cols["item_id"] and not iid:
            raise ValueError(f"{where}: empty item id ({cols['item_id']!r} column)")
        if (lid, iid) in first_line:
            raise ValueError(f"{where}: item {iid!r} appears twice in list {lid!r} (also at {first_line[lid, iid]})")
        first_line[lid, iid] = where
        score = _float(str(r[cols["score"]] or "").strip(), where, "score")
        rel_txt = str(r[cols["relevance"]] or "").strip() if cols["relevance"] else ""
        if cols["relevance"] and not rel_txt:
            empty_rel += 1
        rel = _grade(rel_txt, where, negative_grades, clamped) if rel_txt else 0.0
        g_txt = str(r[cols["group"]] or "").strip() if cols["group"] else ""
        parts = _parse_labels(g_txt, where) if g_txt else None
        items.setdefault(lid, []).append((iid, score, rel, parts, where))
    if not items:
        raise ValueError(f"{path}: the table holds no row")
    notes = [f"{path}: {empty_rel} empty relevance cells read as 0"] if empty_rel else []
    warnings = [f"{len(clamped)} negative relevance grades read as 0 (first at {clamped[0]})"] if clamped else []
    source = f"the {cols['group']!r} column of {path}" if cols["group"] else None
    lists = _build(items, notes, warnings, group_source=source, missing_groups=missing_groups)
    if not cols["relevance"]:
        for d in lists.lists:
            d["relevance"] = None
    return lists
