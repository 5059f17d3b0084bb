"""Reading ranked lists from files: TREC run + qrels (+ group file), or a CSV / Parquet table.

TREC input
----------
* **run** (``trec_eval`` format): ``qid Q0 docid rank score tag``, whitespace separated.  Items are ordered by
  ``score`` (descending); equal scores keep the order of the ``rank`` column (with ``ties="first"``, the default of
  the measures), or are averaged over with ``ties="average"``.  ``use_rank=True`` ranks by the rank column instead.
* **qrels**: ``qid 0 docid rel`` (4 columns), or ``qid 0 docid rel group`` (5 columns, the group label as last
  column).  With ``qrels_groups="iter"`` the second column holds the group ids instead of the unused iteration
  field, comma separated when a document belongs to several groups: the ``QID GID DID REL`` layout the
  expected-exposure evaluator ``expeval`` reads with its ``-G`` option (a first line that is not a judgment, such
  as a header, is skipped).
* **group file** (optional, as in the TREC Fair Ranking track, e.g. document -> author group): ``docid group``
  (one group for the document everywhere) or ``qid docid group`` (per query).  Lines starting with ``#`` are
  comments.  A group file wins over groups found in the qrels.

Rules: a run item absent from the qrels has relevance 0 (unjudged = non-relevant, as ``trec_eval``); qrels
entries absent from the run are ignored (the measures score the run's ranking; recall-type utilities therefore
only see the retrieved relevant items); queries of the run without any qrels entry are kept (all relevance 0,
which makes relevance-based measures undefined for them).  A document without group label gets id ``-1``
(unknown: it is ranked and takes exposure but belongs to no group).  A document with several groups gets soft
membership split equally among them (then every list carries ``[n, G]`` membership rows).

Group labels: if every label is an integer they are used as ids (``-1`` = unknown); otherwise the distinct labels
are sorted and numbered ``0, 1, ...``; :attr:`RankedLists.group_names` gives the name of each id (columns call id
0 ``A``, id 1 ``B``, ...).

Table input
-----------
A CSV (header required) or Parquet file with one row per item and the columns ``list_id``, ``item_id`` (optional),
``score``, ``relevance`` (optional; an empty cell is 0) and ``group`` (optional; an empty cell is unknown, -1).
Accepted aliases: ``qid``/``query_id``/``query`` for ``list_id``; ``docid``/``doc_id``/``item`` for ``item_id``;
``rel``/``label``/``y`` for ``relevance``; ``groups``/``group_id`` for ``group``.  Items keep the row order
within their list (so equal scores are ranked in row order under ``ties="first"``).  Parquet needs pandas with
pyarrow or fastparquet.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch

__all__ = ["RankedLists", "read_trec", "read_run", "read_qrels", "read_group_file", "read_table"]


@dataclass
class RankedLists:
    """Lists ready for :func:`~torchfair.evaluation.table.evaluate`: dicts with ``list_id``, ``item_ids``,
    ``scores``, ``relevance`` and (when known) ``groups``; ``group_names[g]`` names group id g."""

    lists: List[dict]
    group_names: Optional[List[str]] = None
    has_groups: bool = False
    notes: List[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lists)


def _lines(path) -> Iterable[Tuple[int, List[str]]]:
    with open(path) as f:
        for no, line in enumerate(f, 1):
            s = line.strip()
            if s and not s.startswith("#"):
                yield no, s.split()


def _float(x: str, path, no: int, what: str) -> float:
    try:
        return float(x)
    except ValueError:
        raise ValueError(f"{path}:{no}: {what} must be a number; got {x!r}") from None


def read_run(path, use_rank: bool = False) -> Dict[str, List[Tuple[str, int, float]]]:
    """``{qid: [(docid, rank, score), ...]}`` from a TREC run file (6 columns; a missing tag is tolerated)."""
    out: Dict[str, List[Tuple[str, int, float]]] = {}
    seen: Dict[str, set] = {}
    for no, f in _lines(path):
        if len(f) not in (5, 6):
            raise ValueError(f"{path}:{no}: a TREC run line is 'qid Q0 docid rank score tag'; got {len(f)} fields")
        qid, _, doc, rank, score = f[:5]
        r = _float(rank, path, no, "rank")
        s = _float(score, path, no, "score")
        if doc in seen.setdefault(qid, set()):
            raise ValueError(f"{path}:{no}: document {doc!r} appears twice for query {qid!r}")
        seen[qid].add(doc)
        out.setdefault(qid, []).append((doc, int(r), -r if use_rank else s))
    if not out:
        raise ValueError(f"{path}: the run file holds no ranking")
    return out


def read_qrels(path, groups: str = "auto") -> Tuple[Dict[str, Dict[str, float]], Dict[Tuple[str, str], List[str]]]:
    """``({qid: {docid: rel}}, {(qid, docid): [group labels]})`` from a qrels file.

    ``groups``: ``"auto"`` (a 5th column, when present, is the group), ``"column"`` (5 columns required),
    ``"iter"`` (expeval's layout: groups in the 2nd column, comma separated), ``"none"``.
    """
    if groups not in ("auto", "column", "iter", "none"):
        raise ValueError(f"`groups` must be 'auto', 'column', 'iter' or 'none'; got {groups!r}")
    rels: Dict[str, Dict[str, float]] = {}
    grp: Dict[Tuple[str, str], List[str]] = {}
    first = True
    for no, f in _lines(path):
        if len(f) == 3:  # qid docid rel (expeval also reads this)
            f = [f[0], "0", f[1], f[2]]
        if len(f) not in (4, 5):
            raise ValueError(f"{path}:{no}: a qrels line is 'qid 0 docid rel' or 'qid 0 docid rel group'; "
                             f"got {len(f)} fields")
        try:
            rel = float(f[3])
        except ValueError:
            if first:  # a header line
                first = False
                continue
            raise ValueError(f"{path}:{no}: relevance must be a number; got {f[3]!r}") from None
        first = False
        qid, it, doc = f[0], f[1], f[2]
        if rel < 0:  # some collections use -1 / -2 for junk: non-relevant here
            rel = 0.0
        rels.setdefault(qid, {})[doc] = rel
        if groups == "iter":
            grp[(qid, doc)] = [g for g in it.split(",") if g != ""]
        elif groups in ("auto", "column"):
            if len(f) == 5:
                grp[(qid, doc)] = [f[4]]
            elif groups == "column":
                raise ValueError(f"{path}:{no}: groups='column' needs a 5th (group) column")
    return rels, grp


def read_group_file(path) -> Tuple[Dict[str, List[str]], Dict[Tuple[str, str], List[str]]]:
    """``({docid: [labels]}, {(qid, docid): [labels]})`` from ``docid group`` / ``qid docid group`` lines.
    A document listed on several lines belongs to several groups."""
    by_doc: Dict[str, List[str]] = {}
    by_pair: Dict[Tuple[str, str], List[str]] = {}
    for no, f in _lines(path):
        if len(f) == 2:
            by_doc.setdefault(f[0], []).append(f[1])
        elif len(f) == 3:
            by_pair.setdefault((f[0], f[1]), []).append(f[2])
        else:
            raise ValueError(f"{path}:{no}: a group file line is 'docid group' or 'qid docid group'; "
                             f"got {len(f)} fields")
    return by_doc, by_pair


def _group_ids(labels: Iterable[str]) -> Tuple[Dict[str, int], List[str]]:
    uniq = sorted(set(labels))
    try:
        ints = {u: int(u) for u in uniq}
    except ValueError:
        ints = None
    if ints is not None:
        bad = [u for u, v in ints.items() if v < -1]
        if bad:
            raise ValueError(f"integer group ids must be >= 0 (or -1 for unknown); got {bad}")
        G = max([v for v in ints.values()] + [-1]) + 1
        return ints, [str(g) for g in range(G)]
    return {u: i for i, u in enumerate(uniq)}, uniq


def _membership(per_item: List[Optional[List[str]]], ids: Dict[str, int], G: int, soft: bool) -> torch.Tensor:
    if not soft:
        return torch.tensor([ids[g[0]] if g else -1 for g in per_item], dtype=torch.long)
    m = torch.zeros(len(per_item), max(G, 1))
    for i, g in enumerate(per_item):
        known = [ids[x] for x in (g or []) if ids[x] >= 0]
        for x in known:
            m[i, x] += 1.0 / len(known)
        if not known:  # unknown group in soft form: spread nothing is not allowed (rows must sum to 1)
            raise ValueError("with multi-group documents every document needs a group label (soft membership rows "
                             "must sum to 1); give the unlabelled documents a group")
    return m


def _build(items: Dict[str, List[Tuple[str, float, float, Optional[List[str]]]]], notes: List[str]) -> RankedLists:
    """items: qid -> [(docid, score, rel, labels or None)] in ranking/tie order."""
    labels = [x for lst in items.values() for *_, g in lst if g for x in g]
    has_groups = bool(labels)
    soft = any(g is not None and len(g) > 1 for lst in items.values() for *_, g in lst)
    ids, names = _group_ids(labels) if has_groups else ({}, None)
    G = len(names) if names is not None else 0
    out = []
    for qid, lst in items.items():
        d = {"list_id": qid, "item_ids": [x[0] for x in lst],
             "scores": torch.tensor([x[1] for x in lst], dtype=torch.float64),
             "relevance": torch.tensor([x[2] for x in lst], dtype=torch.float64)}
        if has_groups:
            d["groups"] = _membership([x[3] for x in lst], ids, G, soft)
        out.append(d)
    return RankedLists(out, names, has_groups, notes)


def read_trec(run, qrels=None, groups=None, *, qrels_groups: str = "auto", use_rank: bool = False) -> RankedLists:
    """Read a TREC run with its qrels and optional group file (see the module doc)."""
    ranking = read_run(run, use_rank=use_rank)
    rels, qgrp = read_qrels(qrels, qrels_groups) if qrels is not None else ({}, {})
    by_doc, by_pair = read_group_file(groups) if groups is not None else ({}, {})
    notes = []
    items = {}
    unjudged = 0
    for qid, lst in ranking.items():
        # descending score, then the rank column (stable)
        lst = sorted(lst, key=lambda x: (-x[2], x[1]))
        q = rels.get(qid, {})
        if qrels is not None and qid not in rels:
            notes.append(f"query {qid} has no qrels entry: all its items have relevance 0")
        row = []
        for doc, _, score in lst:
            if doc not in q:
                unjudged += 1
            if by_pair or by_doc:
                g = by_pair.get((qid, doc)) or by_doc.get(doc)
            else:
                g = qgrp.get((qid, doc))
            row.append((doc, score, q.get(doc, 0.0), g))
        items[qid] = row
    if unjudged:
        notes.append(f"{unjudged} run items are not in the qrels: relevance 0")
    return _build(items, notes)


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


def read_table(path, fmt: Optional[str] = None) -> RankedLists:
    """Read a CSV or Parquet table of items (see the module doc); ``fmt`` is ``"csv"``/``"parquet"`` (default:
    from the file extension, ``.parquet``/``.pq`` being Parquet, anything else CSV)."""
    fmt = fmt or ("parquet" if str(path).lower().endswith((".parquet", ".pq")) else "csv")
    if fmt == "parquet":
        try:
            import pandas as pd
            df = pd.read_parquet(path)
        except ImportError as e:
            raise ImportError(f"reading Parquet ({path}) needs pandas with pyarrow or fastparquet "
                              f"(pip install pandas pyarrow); or convert the file to CSV") from e
        header = [str(c) for c in df.columns]
        rows = [dict(zip(header, ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in r]))
                for r in df.itertuples(index=False, name=None)]
    elif fmt == "csv":
        with open(path, newline="") as f:
            sample = f.read(4096)
            f.seek(0)
            try:
                dialect = csv.Sniffer().sniff(sample, delimiters=",\t;")
            except csv.Error:
                dialect = csv.excel
            rd = csv.DictReader(f, dialect=dialect)
            header = rd.fieldnames or []
            rows = list(rd)
    else:
        raise ValueError(f"`fmt` must be 'csv' or 'parquet'; got {fmt!r}")
    cols = _resolve_columns(header, path)
    items: Dict[str, list] = {}
    seen = 0
    for i, r in enumerate(rows):
        no = i + 2
        lid = str(r[cols["list_id"]]).strip()
        iid = str(r[cols["item_id"]]).strip() if cols["item_id"] else str(len(items.get(lid, [])))
        score = _float(str(r[cols["score"]]).strip(), path, no, "score")
        rel_txt = str(r[cols["relevance"]]).strip() if cols["relevance"] else ""
        rel = _float(rel_txt, path, no, "relevance") if rel_txt else 0.0
        g_txt = str(r[cols["group"]]).strip() if cols["group"] else ""
        items.setdefault(lid, []).append((iid, score, rel, [g_txt] if g_txt else None))
        seen += 1
    if not seen:
        raise ValueError(f"{path}: the table holds no row")
    lists = _build(items, [])
    if not cols["relevance"]:
        for d in lists.lists:
            d["relevance"] = None
    return lists
