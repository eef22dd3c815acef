"""Pure rendering: validated spec + a small typed context -> Kubernetes manifests and status. No I/O, no clock."""
