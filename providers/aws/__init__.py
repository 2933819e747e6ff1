"""The ``aws_sts`` provider: AssumeRole narrowed by a session policy, revoked by a Deny on the role."""
