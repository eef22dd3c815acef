"""warmstart: warm caches and prefix-aware routing for LLM inference endpoints on Kubernetes."""

__version__ = "0.1.0"
