"""The development kit: what the tests, the benchmarks and the demo share.

- ``slurm``, ``kube`` (with ``kubelet``, ``namespaces``, ``waiting``), ``stack`` (with
  ``processes``, ``stack_objects``), ``helm``: bring up the real components (Slurm chroots or
  any slurmrestd, the local control plane, the bridge's processes, the chart) and their
  pytest fixtures (``tests/conftest.py`` loads them as plugins);
- ``fakes``, ``fake_kube``: Slurm and the apiserver in memory (``FakeSlurm``, ``FakeKube``);
- ``events``: ``RecordedEvents``, a listener to a job's events that records them;
- ``builders``: ``PodBuilder("p").gpus(2).group("g", 2)``, ``JobBuilder(7).running("node1")``;
- ``scontrol``: Slurm's own view (``scontrol``/``squeue`` text), parsed independently of the
  product, for end-to-end checks;
- ``e2e``: waiting for pods, their events, an idle Slurm.

A separate top-level package, not part of the distribution (pyproject's package list names
only the product): the product never imports it (import-linter), and nothing here ships in
the image.
"""
