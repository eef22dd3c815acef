"""The cache CSI node plugin: the node decides which pod may mount which weights cache, read-only or (for the
operator's own Jobs) read-write, so no tenant pod carries a hostPath or a root step (docs/security.md)."""
