"""Compatibility layers that reproduce other libraries' numbers on top of torchfair's orderings and measures.

Submodules are imported explicitly, e.g. ``from torchfair.compat import fairranktune``.
"""
