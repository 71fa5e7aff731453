"""slurmbridge core: Slurm client, pod → job translation, placement state, controllers."""
