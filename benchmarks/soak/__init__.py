"""SOAK: a seeded mixed load with seeded faults, invariants checked from outside the bridge.

``python -m benchmarks.run --only SOAK --minutes M --seed S`` (issue 25).  One module per job:
``schedule`` (the fault schedule a seed fixes), ``invariants`` (what must hold, judged on a
snapshot), ``tracker`` (how long a suspect may last, in time the bridge could act), ``observe``
(the snapshot, read from the apiserver and Slurm's own tools), ``kubelet`` (the harness plays
the kubelet), ``load`` (the workloads), ``faults`` (the injector), ``attacks`` and
``adversary`` (with ``--adversarial``: a tenant trying issue 41's cases 1-6, what it sends and
the actor), ``bench`` (the run).
"""
