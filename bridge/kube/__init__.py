"""Writing to Kubernetes: the few pod and node operations the bridge performs."""
