"""The prefix-aware router: strategies, prefix hashing, proxy, discovery and metrics.

Layering: this package must not import kopf, ``warmstart.controllers`` or ``warmstart.preload``
(checked by import-linter). Entry point: ``warmstart router`` -> :func:`warmstart.router.cli.main`.
"""
