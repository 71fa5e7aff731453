"""Talking to Slurm through slurmrestd: negotiation, auth, wire models, client."""
