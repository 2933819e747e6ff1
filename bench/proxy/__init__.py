"""The egress proxy's figures: tunnels, terminated hosts and their operations, a ``git push``, SigV4 re-signing,
rotation behind a placeholder, a long session.
"""
