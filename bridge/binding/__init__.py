"""Binding: the last step, pod → the node (and GPUs) Slurm allocated."""
