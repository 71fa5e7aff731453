"""Placement state: which Slurm job holds which pod's allocation."""
