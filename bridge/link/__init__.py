"""The pod↔job link, in one place: who owns a placeholder job (``owner``), which replica
submits it and which node each group member gets (``claims`` on ``records``), and what the
bridge writes on a pod about its job (``annotations``: the recorded job id, the binding)."""
