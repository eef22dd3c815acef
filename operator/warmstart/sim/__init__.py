"""Simulated vLLM replicas (prefix KV cache + timing model) and workload generators.

For tests, the demo and the benchmarks; never used on a serving path.
"""
