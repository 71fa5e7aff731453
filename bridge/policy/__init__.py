"""The namespace policy: which Slurm account, user, partitions and QOS a namespace's pods get
(``tenancy``) and what they may ask for (``check``).  Shared by the webhook, which applies it
at admission, and the core, which checks it again right before it submits."""
