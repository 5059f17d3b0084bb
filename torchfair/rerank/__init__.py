"""Re-rankers: act on a trained ranker's scores (post-processing), judged by the exact measures.

Batched and masked ``[B, N]`` on any device, deterministic (ε-greedy given its seed), padding never moved; each
returns a :class:`Reranking` (the ranking, scores reproducing it for any measure, per-list flags).

* :func:`fa_ir`: FA*IR (Zehlike et al., CIKM 2017): every prefix passes the ranked group fairness test;
* :func:`det_const_sort`: DetConstSort (Geyik et al., KDD 2019): a target distribution over any number of groups;
* :func:`interleave`: keep the top ``keep``, then a share ``p`` of every prefix for the protected group;
* :func:`epsilon_greedy`: ε-greedy exploration (Feng & Shah, AAAI 2022), seeded;
* :func:`targeted_rerank`: lowers any declared exact fairness measure under a utility constraint and optional
  guards on other fairness measures (:class:`Guard`, :func:`parse_guards`; torchfair's own);
* :func:`get_reranker` / :data:`RERANKERS`: the spec language (``"fa_ir:p=0.5"``, ``"targeted:measure=dips,keep=10"``)
  shared by ``torchfair evaluate --rerank``, the training loop and the sweeps; :func:`rerank_lists` re-ranks
  ragged lists (dicts of 1-D tensors, as the evaluation engine takes them);
* :class:`RerankedLoss`: a fairness loss on the order a re-ranker serves, its gradient straight through to the
  scores (train the model for the re-ranked list).
"""
from ._common import Reranking
from .detconstsort import det_const_sort
from .epsilon_greedy import epsilon_greedy
from .fa_ir import fa_ir
from .interleave import interleave
from .reranked_loss import RerankedLoss, straight_through_scores
from .registry import RERANKERS, Reranker, get_reranker, list_rerankers, parse_spec, rerank_lists
from .targeted import Guard, estimate_relevance, parse_guards, targeted_rerank

__all__ = ["Reranking", "fa_ir", "det_const_sort", "interleave", "epsilon_greedy", "targeted_rerank", "estimate_relevance",
           "Guard", "parse_guards", "Reranker", "get_reranker", "parse_spec", "list_rerankers", "RERANKERS",
           "rerank_lists", "RerankedLoss", "straight_through_scores"]
