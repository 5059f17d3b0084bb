"""Dev-only: LensKit's implicit ALS (``lenskit.als.ImplicitMFScorer``) on a split exported by torchfair.

The split is that of the starts of ``configs/sweep_starts_ials.yaml`` (split ``random``).  Runs inside a separate
environment with LensKit (it needs pandas < 3; see docs/guides/development.md):

    python -m venv ../lkvenv && ../lkvenv/bin/pip install torch==2.13.0 lenskit "pandas<3"
    ../lkvenv/bin/python experiments/lenskit_ials.py --inp IN.npz --out OUT.npz

``IN.npz`` (written by ``experiments/start_ranker.py``): ``train_user``, ``train_item``, ``train_rating`` (the
training ratings, 0-based ids), ``num_users``, ``num_items``, ``grid`` (rows ``[dim, weight, reg, epochs]``) and,
per split ``val`` / ``test``, ``<split>_user`` (one id per list) with the users' item ids flattened in
``<split>_items`` and cut by ``<split>_offsets``.  ``OUT.npz``: ``<split>_scores_<k>`` (the scores of config ``k``
for the flattened items) and ``wall_<k>`` (training seconds).  The scores are ``user_embeddings @ item_embeddings.T``
of the trained scorer, which is what ``ImplicitMFScorer.__call__`` returns for a user seen in training.
"""
from __future__ import annotations

import sys
import time

import numpy as np


def run(inp: str, out: str) -> int:
    import pandas as pd
    from lenskit.als import ImplicitMFScorer
    from lenskit.data import from_interactions_df

    d = np.load(inp)
    df = pd.DataFrame({"user_id": d["train_user"], "item_id": d["train_item"], "rating": d["train_rating"]})
    users = np.arange(int(d["num_users"]))
    items = np.arange(int(d["num_items"]))
    ds = from_interactions_df(df, user_col="user_id", item_col="item_id", rating_col="rating", users=users,
                              items=items)
    res = {}
    for k, (dim, weight, reg, epochs) in enumerate(d["grid"]):
        t0 = time.time()
        scorer = ImplicitMFScorer(embedding_size=int(dim), weight=float(weight), regularization=float(reg),
                                  epochs=int(epochs))
        scorer.train(ds)
        res[f"wall_{k}"] = np.array(time.time() - t0)
        unum = scorer.users.numbers(users)
        inum = scorer.items.numbers(items)
        U = np.zeros((len(users), scorer.user_embeddings.shape[1]), dtype=np.float64)
        V = np.zeros((len(items), scorer.item_embeddings.shape[1]), dtype=np.float64)
        U[:] = scorer.user_embeddings[unum]
        V[:] = scorer.item_embeddings[inum]
        for split in ("val", "test"):
            u = d[f"{split}_user"]
            off = d[f"{split}_offsets"]
            its = d[f"{split}_items"]
            rep = np.repeat(u, np.diff(off))
            res[f"{split}_scores_{k}"] = np.einsum("nd,nd->n", U[rep], V[its])
        print(f"[lenskit] config {k}: dim {dim}, weight {weight}, reg {reg}, epochs {epochs}: "
              f"{res[f'wall_{k}']:.1f} s", flush=True)
    np.savez(out, **res)
    return 0


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--inp", default="in.npz", help="the split and grid, as written by experiments/start_ranker.py")
    ap.add_argument("--out", default="out.npz", help="where the scores go")
    a = ap.parse_args(argv)
    return run(a.inp, a.out)


if __name__ == "__main__":
    sys.exit(main())
