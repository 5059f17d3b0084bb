"""A synthetic TREC collection with every case trec_eval's conventions decide (ties, judged documents the run
misses, unjudged documents, queries without relevant documents, run queries without qrels), written as files."""
import random

NAMES = ["ndcg", "ndcg_cut_5", "ndcg_cut_10", "P_5", "P_10", "recall_10", "recall_100", "recip_rank", "map", "Rprec"]
TREC_MEASURES = {"ndcg", "ndcg_cut", "P", "recall", "recip_rank", "map", "Rprec"}


def synthetic_collection(seed: int, n_queries: int = 200):
    """``(run, qrels)`` dicts as pytrec_eval takes them: scores on a coarse grid (many ties, ids chosen so that
    docno order differs from insertion and rank order), graded qrels 0..3 with a few junk grades -1, judged
    documents missing from the run, unjudged documents in the run, queries whose judgments are all non-relevant,
    run queries without qrels and qrels queries without run."""
    rng = random.Random(seed)
    run, qrels = {}, {}
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


def write_trec(run, qrels, folder):
    """The dicts as a TREC run (ranked by score, rank column 1..n) and a qrels file."""
    with open(folder / "run.txt", "w") as f:
        for q, docs in run.items():
            for i, (d, s) in enumerate(sorted(docs.items(), key=lambda x: -x[1])):
                f.write(f"{q} Q0 {d} {i + 1} {s!r} tag\n")
    with open(folder / "qrels.txt", "w") as f:
        for q, docs in qrels.items():
            for d, r in docs.items():
                f.write(f"{q} 0 {d} {r}\n")
    return folder / "run.txt", folder / "qrels.txt"
