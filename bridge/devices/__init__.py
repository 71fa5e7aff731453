"""DRA ResourceClaims a slurmbridge pod brings: what Slurm is asked for, and the claims
written with the devices Slurm allocated."""
