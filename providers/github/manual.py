"""What docs/reference.md says of the ``github_app`` type: the keys its loaders read, the hint its tokens set."""

from __future__ import annotations

from broker.vocab.manual import Hint, Key, ProviderManual

MANUAL = ProviderManual(
    summary="GitHub App installation tokens.",
    example="""\
# [providers.github]
# type = "github_app"
# app_id = "123456"
# private_key_file = "/etc/broker/github-app.pem"   # mode 0600
# api_url = "https://api.github.com"                # GitHub Enterprise Server: https://HOST/api/v3""",
    config=(
        Key("app_id", "digits", True, "The App's numeric id."),
        Key("private_key_file", "path", True, "The App's RSA private key (PEM, mode 0600)."),
        Key("api_url", "URL", False, "GitHub Enterprise Server: https://HOST/api/v3.", "https://api.github.com"),
        Key("timeout", "seconds", False, "HTTP timeout.", "10"),
    ),
    manifest=(
        Key("repositories", "list", False, "github_app: owner/name, one owner, 1 to 500."),
        Key("permissions", "table", False, "github_app: permission name -> read | write | admin."),
    ),
    grant=(
        Key("repositories", "list", False, "github_app: owner/name globs."),
        Key("permissions", "table", False, "github_app: permission -> highest level (none<read<write<admin)."),
    ),
    hints=(
        Hint(
            "GIT_CONFIG_GLOBAL",
            "github_app",
            "<name>/gitconfig: a credential helper giving git the token, for the git host of api_url only.",
        ),
    ),
)
