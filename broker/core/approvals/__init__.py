"""Approvals: a session under a rule that says ``approval`` mints nothing until a person approves it.

``ticket`` opens the request (the ``awaiting-approval`` session and its
digest), ``deciding`` approves, denies, withdraws, lists and expires requests,
``waiting`` waits for a decision. Collecting an approved session is
``broker.core.resuming``, which issues it.
"""
