"""The ``aws_sts`` instance's table beyond its clients: the STS actions its proxy re-signs, its federation.

``proxy_sts_actions`` names what the proxy re-signs on STS for ``inject:
proxy`` credentials (never an action that answers with credentials: listing
one is an error naming it). ``web_identity = true`` assumes each session's
role with a token of the broker's issuer (``providers.aws.web_identity``):
no profile then, and ``broker_role_arn`` (the broker's own role) unless
``revoke = "expire"``, which alone needs no IAM call of the broker's own.
"""

from __future__ import annotations

import re

from broker.vocab.errors import ConfigError
from broker.vocab.fields import Fields
from providers.aws.request import ROLE_ARN
from providers.aws.web_identity import DEFAULT_AUDIENCE, WebIdentity

#: ``proxy_sts_actions``: what the proxy re-signs on STS for inject: proxy (``broker.egress.injectors.sigv4.actions``).
DEFAULT_STS_ACTIONS = ("GetCallerIdentity",)
#: STS actions that answer with credentials or a token good elsewhere: the proxy never re-signs them.
CREDENTIAL_ACTION = re.compile(r"assume.*|get.*(?:token|credentials?)", re.IGNORECASE)
ACTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]{0,127}", re.ASCII)
AUDIENCE = re.compile(r"[\x21-\x7e]{1,256}", re.ASCII)


def sts_actions(fields: Fields) -> frozenset[str]:
    """``proxy_sts_actions``: the STS actions the proxy re-signs for this instance's ``inject: proxy``
    credentials; listing one that answers with credentials is an error naming it."""
    listed = fields.string_list(
        "proxy_sts_actions",
        required=False,
        pattern=ACTION_NAME,
        min_items=0,
        max_items=32,
        max_len=128,
        hint="an STS action name, e.g. GetCallerIdentity",
    )
    if listed is None:
        return frozenset(DEFAULT_STS_ACTIONS)
    for index, action in enumerate(listed):
        if CREDENTIAL_ACTION.fullmatch(action):
            message = f"{action} answers with new credentials; the proxy never re-signs it"
            raise fields.fail(f"proxy_sts_actions[{index}]", message)
    return frozenset(listed)


def web_identity(fields: Fields, name: str, revoke: str, profile: str | None) -> WebIdentity | None:
    """``web_identity``, ``web_identity_audience`` and ``broker_role_arn``; None when the broker has keys."""
    enabled = fields.boolean("web_identity", False)
    audience = fields.string("web_identity_audience", required=False, pattern=AUDIENCE, max_len=256)
    role = fields.string("broker_role_arn", required=False, pattern=ROLE_ARN, max_len=2048, hint="a role ARN")
    if not enabled:
        for key, value in (("web_identity_audience", audience), ("broker_role_arn", role)):
            if value is not None:
                raise fields.fail(key, "only with web_identity = true")
        return None
    if profile is not None:
        raise fields.fail("profile", "not with web_identity = true: the broker holds no AWS key of its own")
    if role is None and revoke != "expire":
        raise ConfigError(
            f'providers.{name}.broker_role_arn: web_identity with revoke = "deny-policy" needs the role the'
            ' broker\'s own IAM calls are made as (GetRole, the deny policy); name it, or set revoke = "expire"'
        )
    return WebIdentity(audience or DEFAULT_AUDIENCE, role)
