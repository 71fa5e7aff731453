"""Pod → Slurm job request: what a pod asks for, in Slurm's terms."""
