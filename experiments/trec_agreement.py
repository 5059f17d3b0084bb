"""Agreement of torchfair's measures with trec_eval, query by query, under trec_eval's conventions.

torchfair reads a TREC run + qrels with ``read_trec(run, qrels, **TREC_READ)`` (trec_eval's ranking order: score
descending, then document id descending; its query set: the run's queries that are in the qrels; negative grades
0; every list carrying the grades of all judged documents of its query) and measures it with
``evaluate_lists(lists, names, **TREC_EVAL)`` (linear NDCG gain, relevant = grade >= 1, a query without relevant
document counting 0), asking for the measures by trec_eval's names.  trec_eval is pytrec_eval (the
pytrec-eval-terrier wheel: trec_eval 9.0.x compiled in) on the same run and qrels.  For every measure the table
gives the number of queries both evaluate (and whether the two query sets are equal), the largest absolute
per-query difference, and both means.

Collections:

* **synthetic** (``--seed``, ``--queries``): graded qrels 0..3 with a few junk grades -1, scores on a coarse grid
  (many ties, document ids whose string order differs from the rank column), judged documents missing from the
  run, unjudged documents in the run, queries whose judgments are all non-relevant, run queries without qrels and a
  qrels query without run (the generator of tests/evaluation/test_table_trec.py);
* **MovieLens** (``--variant``, ML-100K by default: its 943 users): a popularity run -- every user's full-catalogue
  test list (the catalogue minus the user's training and validation items, leave-last-``--n-test``-out split of
  :func:`torchfair.data.split_ratings`) scored by the items' training rating counts (ties between equally popular
  items) -- against qrels holding each user's test ratings (1..5) as grades.

``--fast``: 50 synthetic queries and the synthetic MovieLens variant (60 users); nothing is written unless ``--out``
is given.  ``python experiments/trec_agreement.py --help``.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

#: trec_eval's measures compared, by the names trec_eval prints (torchfair accepts them as measure names)
NAMES = ["ndcg", "ndcg_cut_5", "ndcg_cut_10", "P_5", "P_10", "recall_10", "recall_100", "recip_rank", "map", "Rprec"]
#: the pytrec_eval measure families holding :data:`NAMES`
TREC_MEASURES = {"ndcg", "ndcg_cut", "P", "recall", "recip_rank", "map", "Rprec"}

Run = Dict[str, Dict[str, float]]
Qrels = Dict[str, Dict[str, int]]


def synthetic_collection(seed: int, n_queries: int = 200) -> Tuple[Run, Qrels]:
    """``(run, qrels)`` as pytrec_eval takes them (see the module doc; the tests use it too)."""
    rng = random.Random(seed)
    run: Run = {}
    qrels: Qrels = {}
    for q in range(n_queries):
        qid = f"q{q}"
        n = rng.randint(1, 150)
        docs = [f"d{rng.randrange(1000)}-{i}" for i in range(n)]
        run[qid] = {d: rng.randint(0, 12) / 4 for d in docs}
        if rng.random() < 0.05:  # in the run only
            continue
        judged = rng.sample(docs, rng.randint(0, n)) + [f"miss{q}-{j}" for j in range(rng.randint(0, 15))]
        none_relevant = rng.random() < 0.1
        qrels[qid] = {d: 0 if none_relevant else rng.choice([0, 0, 0, 1, 1, 2, 3, -1]) for d in judged} \
            or {f"only{q}": 0}
    qrels["not-in-run"] = {"a": 2, "b": 1}
    return run, qrels


def movielens_collection(variant: str, n_test: int, seed: int) -> Tuple[Run, Qrels, Dict[str, Any]]:
    """The popularity run on every user's full-catalogue test list and the qrels of the test ratings."""
    import numpy as np

    from torchfair.data import encode, evaluation_lists, load_movielens, split_ratings, synthetic_movielens

    ml = synthetic_movielens(seed=seed) if variant == "synthetic" else load_movielens(variant)
    enc = encode(ml)
    split = split_ratings(enc.ratings, "leave_last_n", n_test=n_test, n_val=0, seed=seed)
    num_items = len(enc.item_ids)
    popularity = np.bincount(split.train["item"].to_numpy(), minlength=num_items).astype(np.float64)
    lists = evaluation_lists(split.train, split.test, num_items)
    run: Run = {}
    qrels: Qrels = {}
    for k in range(len(lists.users)):
        user, items, rel = lists.users[k], lists.items[k], lists.relevance[k]
        qid = f"u{int(enc.user_ids[user])}"
        docs = [f"i{int(enc.item_ids[i])}" for i in items]
        run[qid] = {d: float(popularity[i]) for d, i in zip(docs, items)}
        qrels[qid] = {d: int(round(float(r))) for d, r in zip(docs, rel) if r > 0}
    info = {"variant": variant, "users": len(run), "items": num_items, "n_test": n_test,
            "run_lines": sum(len(v) for v in run.values()), "judged": sum(len(v) for v in qrels.values())}
    return run, qrels, info


def write_trec(run: Run, qrels: Qrels, folder: str) -> Tuple[str, str]:
    """The dicts as a TREC run (by score, rank column 1..n) and a qrels file under ``folder``."""
    rp, qp = os.path.join(folder, "run.txt"), os.path.join(folder, "qrels.txt")
    with open(rp, "w") as f:
        for q, docs in run.items():
            for i, (d, s) in enumerate(sorted(docs.items(), key=lambda x: -x[1])):
                f.write(f"{q} Q0 {d} {i + 1} {s!r} popularity\n")
    with open(qp, "w") as f:
        for q, docs in qrels.items():
            for d, r in docs.items():
                f.write(f"{q} 0 {d} {r}\n")
    return rp, qp


def agreement(run: Run, qrels: Qrels) -> Dict[str, Any]:
    """Both evaluations of one collection through files: rows ``{measure, n, same_queries, max_diff, mean_tf,
    mean_te}`` and the seconds each took (torchfair: reading included)."""
    import numpy as np
    import pytrec_eval

    from torchfair.evaluation import TREC_EVAL, TREC_READ, evaluate_lists, read_trec

    with tempfile.TemporaryDirectory() as tmp:
        rp, qp = write_trec(run, qrels, tmp)
        t = time.time()
        data = read_trec(rp, qp, **TREC_READ)
        table = evaluate_lists(data.lists, NAMES, bootstrap=0, **TREC_EVAL)
        tf_s = time.time() - t
    t = time.time()
    ref = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES).evaluate(run)
    te_s = time.time() - t
    ids = list(table.list_ids)
    common = [q for q in ids if q in ref]
    rows = []
    for name in NAMES:
        col = dict(zip(ids, table[name].tolist()))
        diffs = [abs(col[q] - ref[q][name]) for q in common]
        rows.append({"measure": name, "n": len(common), "same_queries": set(ids) == set(ref),
                     "max_diff": max(diffs) if diffs else float("nan"), "mean_tf": table.mean[name],
                     "mean_te": float(np.mean([ref[q][name] for q in ref])) if ref else float("nan")})
    return {"rows": rows, "seconds_torchfair": tf_s, "seconds_trec_eval": te_s, "n_torchfair": len(ids),
            "n_trec_eval": len(ref)}


def markdown(rows: List[Dict[str, Any]]) -> str:
    out = ["| measure | queries compared | same query set | max abs per-query diff | mean torchfair | mean trec_eval |",
           "|---|---:|:---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| `{r['measure']}` | {r['n']} | {'yes' if r['same_queries'] else 'NO'} | {r['max_diff']:.1e} | "
                   f"{r['mean_tf']:.6f} | {r['mean_te']:.6f} |")
    return "\n".join(out)


def run_all(args: argparse.Namespace, say=print) -> Dict[str, Any]:
    t0 = time.time()
    n_queries = min(args.queries, 50) if args.fast else args.queries
    run, qrels = synthetic_collection(args.seed, n_queries)
    syn = agreement(run, qrels)
    syn["info"] = {"seed": args.seed, "queries": n_queries, "qrels_queries": len(qrels),
                   "run_lines": sum(len(v) for v in run.values())}
    say(f"[{time.time() - t0:5.1f}s] synthetic: {syn['n_torchfair']} queries evaluated")
    variant = "synthetic" if args.fast else args.variant
    run, qrels, info = movielens_collection(variant, args.n_test, args.seed)
    ml = agreement(run, qrels)
    ml["info"] = info
    say(f"[{time.time() - t0:5.1f}s] {variant}: {ml['n_torchfair']} queries evaluated")
    return {"synthetic": syn, "movielens": ml, "seconds": time.time() - t0}


def report(res: Dict[str, Any], command: str) -> str:
    syn, ml = res["synthetic"], res["movielens"]
    si, mi = syn["info"], ml["info"]
    return f"""# torchfair against trec_eval, query by query

Command: `{command}`  
Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; wall time {res['seconds']:.1f} s ({os.cpu_count()} CPUs)

torchfair: `read_trec(run, qrels, **TREC_READ)` then `evaluate_lists(lists, {NAMES}, **TREC_EVAL)`
(`TREC_READ = {{"ties": "docno", "queries": "qrels", "negative_grades": "zero", "ideal": "qrels"}}`,
`TREC_EVAL = {{"gain": "linear", "threshold": 0.0, "undefined": "zero"}}`), the measures asked for by trec_eval's
names.  trec_eval: pytrec_eval (`pytrec-eval-terrier`) on the same run and qrels dicts.  "max abs per-query diff"
is over the queries both evaluate; the means are each tool's own mean over its own query set.

## Synthetic collection (seed {si['seed']}, {si['queries']} run queries, {si['qrels_queries']} qrels queries, {si['run_lines']} run lines)

Graded qrels 0..3 and a few -1, tied scores, judged documents missing from the run, unjudged documents in the run,
queries without relevant judgment, run queries without qrels, a qrels query without run.  torchfair
{syn['seconds_torchfair']:.2f} s (files read and measured), trec_eval {syn['seconds_trec_eval']:.3f} s (dicts in memory).

{markdown(syn['rows'])}

## MovieLens ({mi['variant']}: {mi['users']} users, {mi['items']} items, popularity run)

Each user's full-catalogue test list (catalogue minus training items; leave-last-{mi['n_test']}-out) scored by the
items' training popularity (equal counts tie: trec_eval's docno order decides), qrels = the user's test ratings as
grades 1..5; {mi['run_lines']} run lines, {mi['judged']} judgments.  torchfair {ml['seconds_torchfair']:.2f} s,
trec_eval {ml['seconds_trec_eval']:.3f} s.

{markdown(ml['rows'])}
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--fast", action="store_true",
                   help="50 synthetic queries and the synthetic MovieLens variant; writes nothing unless --out")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic collection and of the split")
    p.add_argument("--queries", type=int, default=200, help="run queries of the synthetic collection")
    p.add_argument("--variant", default="ml-100k", help="MovieLens variant of the popularity run (--fast: synthetic)")
    p.add_argument("--n-test", type=int, default=10, help="test ratings per user (leave-last-n-out split)")
    p.add_argument("--out", default="experiments/results",
                   help="directory of trec_agreement.md (--fast: nothing is written unless given)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    res = run_all(args)
    given = argv if argv is not None else sys.argv[1:]
    cmd = ("python experiments/trec_agreement.py " + " ".join(given)).strip()
    text = report(res, cmd)
    print(text)
    if not args.fast or "--out" in given:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "trec_agreement.md")
        with open(path, "w") as f:
            f.write(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
