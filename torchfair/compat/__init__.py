"""Compatibility layers that reproduce other tools' numbers on top of torchfair's orderings and measures.

* :mod:`.fairranktune`: FairRankTune 0.0.7's metrics and aggregators;
* :mod:`.expeval`: expeval's expected exposure (Diaz et al., CIKM 2020), every command-line flag;
* :mod:`.trec_fair`: TREC Fair Ranking 2021 / 2022 Task 1 AWRF with the tracks' unknown-group conventions.

Submodules are imported explicitly, e.g. ``from torchfair.compat import fairranktune``.
"""
