"""Losses: measures of :mod:`torchfair.metrics` on differentiable orderings, reduced to scalars; utility losses;
and the :class:`FairnessRegularizer` that combines them."""
from .below import BelowTopK, below_top_k_mask
from .fairness import (DELTRLoss, DIPSLoss, ExposureMisallocationLoss, FairPGRankLoss, PairwiseAccuracyGapLoss,
                       PairwiseCorrelationLoss, deltr_loss, dips_loss, exposure_misallocation_loss,
                       fair_pg_rank_loss, pairwise_accuracy_gap_loss, pairwise_correlation_loss, reduce_loss)
from .multi import MultiMeasureLoss, multi_measure_loss
from .regularizer import FairnessRegularizer
from .transform import REDUCERS, LossModule, MeasureLoss, default_ordering, measure_loss
from .utility import (ApproxNDCGLoss, LambdaNDCGLoss, lambda_ndcg_loss, ListMLELoss, ListNetLoss, NeuralNDCGLoss, PLNDCGLoss, approx_ndcg_loss,
                      listmle_loss, listnet_loss, neural_ndcg_loss, pl_ndcg_loss)

__all__ = ["BelowTopK", "below_top_k_mask", "measure_loss", "MeasureLoss", "LossModule", "REDUCERS", "default_ordering", "multi_measure_loss",
           "MultiMeasureLoss", "DIPSLoss", "ExposureMisallocationLoss", "PairwiseAccuracyGapLoss", "DELTRLoss", "FairPGRankLoss",
           "PairwiseCorrelationLoss", "dips_loss", "exposure_misallocation_loss", "pairwise_accuracy_gap_loss",
           "deltr_loss", "fair_pg_rank_loss", "pairwise_correlation_loss", "reduce_loss", "FairnessRegularizer",
           "ListNetLoss", "ListMLELoss", "ApproxNDCGLoss", "LambdaNDCGLoss", "lambda_ndcg_loss", "NeuralNDCGLoss", "PLNDCGLoss", "listnet_loss",
           "listmle_loss", "approx_ndcg_loss", "neural_ndcg_loss", "pl_ndcg_loss"]
