"""innet hardware: Amaranth RTL for the in-switch reduction unit, link arbiters and the switch.

This package imports Amaranth only. Python models and tools live in :mod:`sim`.
"""
