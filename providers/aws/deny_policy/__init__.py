"""``revoke = "deny-policy"``: a revoked session cut off by a Deny in its role's inline policy.

``layout`` (the deny policy's document), ``writes`` (its read-modify-write
rounds, ``DenyPolicies``), ``budget`` (room for each revocation held before
minting, ``Reservations``) and ``locks`` (who waits for whom on a role, across
this host's processes and a fleet's hosts).
"""
