"""Preloading model weights into a node's local cache (`warmstart preload`); free of kopf and of the router."""
