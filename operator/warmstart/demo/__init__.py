"""`warmstart demo`: the whole story on the local control plane, with a real node for the seed endpoint.

:mod:`flow` runs it; :mod:`seed` adapts the seed example to the real node; :mod:`facts` reads what happened from the
cluster (pods, timings, preload results); :mod:`table` is the live view.
"""

from warmstart.demo.flow import main

__all__ = ["main"]
