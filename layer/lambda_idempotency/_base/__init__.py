"""Foundations: errors, values, clocks, canonical text and key hashes, what an outcome reports.

Nothing here imports another of the package's folders."""
