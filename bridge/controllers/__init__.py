"""Controllers that keep Kubernetes and Slurm in step; they act only while leader."""
