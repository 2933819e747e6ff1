"""What docs/reference.md says of the ``identity`` type: a manifest's audience, the audiences a grant lists."""

from __future__ import annotations

from broker.vocab.manual import Key, ProviderManual

MANUAL = ProviderManual(
    summary=(
        "A session's own JWT, signed by the broker's issuer ([identity]): the file NAME/token, renewed before it"
        " ends while an exec runs (broker renew otherwise); with inject: proxy it stays in the proxy."
    ),
    example="""\
# [providers.identity]                             # made by [identity] alone; a table only to add another name
# type = "identity\"""",
    config=(),
    manifest=(Key("audience", "string", False, "identity: the token's aud (required for this type)."),),
    grant=(Key("audiences", "list", False, "identity: the audiences a rule may ask for, compared exactly."),),
)
