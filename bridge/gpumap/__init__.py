"""Who holds each GPU: Slurm's allocation, the bridge's records on pods and DRA claims, side by
side per node and index, and where they disagree (``model.py``); the adapters read each side
into the model's facts.  ``slurmbridge gpus``, ``kubectl slurmbridge gpus`` and the metrics
all draw the same map."""
