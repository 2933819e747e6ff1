"""Approvals: a session under a rule that says ``approval`` mints nothing until a person approves it.

``ticket`` opens the request (the ``awaiting-approval`` session and its
digest), ``deciding`` approves, denies, withdraws, lists and expires requests,
``waiting`` waits for a decision and ``settling`` turns its end into the
approved request or the error it means. Issuing an approved session is
``broker.core.issuing.resuming`` (``issue --resume``) or the running session
of ``broker exec``.
"""
