"""The bridge's background loops: the Slurm poller and the pruning on every replica; the leader
election, and while leader the intake and the controllers keeping Kubernetes and Slurm in step."""
