"""The ``slurmbridge`` command: the top layer, which starts the extender, the webhook and the
bridge's tools.  Outside ``bridge/`` so that the core never imports its HTTP faces."""
