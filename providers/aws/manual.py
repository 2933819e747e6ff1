"""What docs/reference.md says of the ``aws_sts`` type: the keys its loaders read, the hints its credentials set."""

from __future__ import annotations

from broker.vocab.manual import Hint, Key, ProviderManual, Section

MANUAL = ProviderManual(
    summary="AWS STS AssumeRole.",
    example="""\
# [providers.aws]
# type = "aws_sts"
# region = "us-east-1"
# endpoint_url = "http://127.0.0.1:5000"   # moto, LocalStack, VPC endpoints
# profile = "broker"                       # the broker's own AWS identity; default chain otherwise
# revoke = "deny-policy"                   # or "expire": sessions stay valid until they expire
# proxy_sts_actions = ["GetCallerIdentity"]  # what the proxy re-signs on STS for inject: proxy""",
    config=(
        Key("region", "string", True, "e.g. us-east-1."),
        Key("endpoint_url", "URL", False, "STS and IAM endpoint (moto, LocalStack, VPC endpoints)."),
        Key("profile", "string", False, "The broker's own AWS profile; the default chain otherwise."),
        Key(
            "revoke",
            "deny-policy | expire",
            False,
            "deny-policy: a Deny on the session's aws:SourceIdentity on the role (an issue is refused"
            " when its revocation would not fit the role's inline-policy budget); expire: valid until"
            " expires_at.",
            "deny-policy",
        ),
        Key("timeout", "seconds", False, "HTTP timeout.", "10"),
        Key(
            "web_identity",
            "boolean",
            False,
            "true: each session's role is assumed with AssumeRoleWithWebIdentity and a token of the broker's issuer"
            " ([identity]); no AWS key on the host (no profile).",
            "false",
        ),
        Key(
            "web_identity_audience",
            "string",
            False,
            "The tokens' aud (the OIDC provider's client id).",
            "sts.amazonaws.com",
        ),
        Key(
            "broker_role_arn",
            "ARN",
            False,
            "web_identity: the role the broker's own IAM calls are made as (GetRole, the deny policy), assumed with"
            ' a token naming the broker; required unless revoke = "expire".',
        ),
        Key(
            "proxy_sts_actions",
            "list",
            False,
            "The STS actions the proxy re-signs for inject: proxy credentials; any other is refused (403)."
            " AssumeRole*, GetSessionToken, GetFederationToken and every Get*Token or Get*Credentials action"
            " answer with new credentials: never re-signed, a config error when listed.",
            '["GetCallerIdentity"]',
        ),
        Key(
            "shared_role_writers",
            "boolean",
            False,
            "true when brokers on several hosts revoke on the same roles: wait for IAM to settle.",
            "false",
        ),
    ),
    manifest=(
        Key("role_arn", "ARN", False, "aws_sts: the role to assume."),
        Key("session_policy", "IAM policy", False, "aws_sts: inline policy narrowing the role."),
        Key("policy_arns", "list", False, "aws_sts: managed policies narrowing the role (same account)."),
    ),
    grant=(
        Key("roles", "list", False, "aws_sts: role ARN globs (IAM-style *)."),
        Key("actions", "list", False, "aws_sts: what a session policy may Allow (containment, case-insensitive)."),
        Key("resources", "list", False, "aws_sts: resource patterns Allow statements must stay within."),
        Key("require_session_policy", "boolean", False, "aws_sts: refuse requests without one.", "false"),
        Key("policy_arns", "list", False, "aws_sts: managed policy ARN globs a request may attach."),
    ),
    sections=(
        Section(
            "Manifest: credentials[].session_policy (aws_sts)",
            "credentials[].session_policy",
            (
                Key("Version", "string", True, '"2012-10-17" (or "2008-10-17").'),
                Key("Statement", "list", True, "1 to 100 statements."),
            ),
        ),
        Section(
            "Manifest: credentials[].session_policy.Statement[] (aws_sts)",
            "credentials[].session_policy.Statement[]",
            (
                Key("Sid", "string", False, "Statement id."),
                Key("Effect", "Allow | Deny", True, "Deny statements are always allowed by policy."),
                Key("Action", "string or list", True, "NotAction is denied by every grant (exit 3, logged)."),
                Key("Resource", "string or list", True, "NotResource is denied by every grant (exit 3, logged)."),
                Key("Condition", "table", False, "IAM condition block."),
            ),
        ),
    ),
    hints=(
        Hint("AWS_SHARED_CREDENTIALS_FILE", "aws_sts", "<name>/credentials: the session's keys."),
        Hint("AWS_CONFIG_FILE", "aws_sts", "<name>/config: region and endpoint."),
        Hint("AWS_REGION", "aws_sts", "The provider's region."),
    ),
)
