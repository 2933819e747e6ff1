"""What docs/reference.md says of the ``vault`` type: the keys its loaders read, the hints its credentials set."""

from __future__ import annotations

from broker.vocab.manual import Hint, Key, ProviderManual

MANUAL = ProviderManual(
    summary="Vault or OpenBao.",
    example="""\
# [providers.vault]
# type = "vault"
# addr = "http://127.0.0.1:8200"
# token_file = "/etc/broker/vault-token"   # mode 0600; or approle_role_id_file + approle_secret_id_file
# token_role = "broker-session"            # an orphan=true token role: session tokens outlive the broker's login
# namespace = "team-a\"""",
    config=(
        Key("addr", "URL", True, "https://host[:port]; http only for 127.0.0.0/8, ::1 or localhost."),
        Key("token_file", "path", False, "The broker's own token (mode 0600); or the two AppRole files."),
        Key("approle_role_id_file", "path", False, "AppRole role id file, with approle_secret_id_file."),
        Key("approle_secret_id_file", "path", False, "AppRole secret id file (mode 0600)."),
        Key("approle_mount", "string", False, "Mount path of the AppRole auth method.", "approle"),
        Key(
            "auth",
            "token | approle | jwt",
            False,
            "jwt: log in with a token of the broker's issuer ([identity]): no Vault token file at all.",
            "from the files given",
        ),
        Key("jwt_role", "string", False, 'auth = "jwt": the role at the jwt auth method, bound to the issuer.'),
        Key("jwt_mount", "string", False, 'auth = "jwt": mount path of the jwt auth method.', "jwt"),
        Key(
            "jwt_audience",
            "string",
            False,
            "auth = \"jwt\": the login token's aud (the role's bound_audiences).",
            "vault",
        ),
        Key("namespace", "string", False, "Vault Enterprise / OpenBao namespace."),
        Key(
            "token_role",
            "string",
            False,
            "Orphan=true token role to mint through; without one, auth/token/create-orphan.",
        ),
        Key("timeout", "seconds", False, "HTTP timeout.", "10"),
        Key("database_mount", "string", False, "Mount path of the database secrets engine.", "database"),
        Key("pki_mount", "string", False, "Mount path of the pki secrets engine.", "pki"),
        Key("ssh_mount", "string", False, "Mount path of the ssh secrets engine (a CA).", "ssh"),
        Key("secret_mount", "string", False, "Mount path of the KV v2 engine kind: secret reads.", "secret"),
        Key(
            "dynamic_policies",
            "list",
            False,
            "Vault policies of the per-credential lease holder token that asks for database and pki"
            " credentials (read on MOUNT/creds/ROLE, update on MOUNT/issue/ROLE); token_role must allow them."
            " Revoking the holder, or its expiry at the credential's ttl, revokes the lease.",
        ),
        Key("database_hint_host", "string", False, "PGHOST hint and pgpass host for kind: database."),
        Key("database_hint_port", "integer", False, "PGPORT hint and pgpass port for kind: database."),
        Key("database_hint_database", "string", False, "PGDATABASE hint and pgpass database for kind: database."),
    ),
    manifest=(
        Key("kind", "token | database | pki | ssh | secret", False, "vault: what to mint or read.", "token"),
        Key("path", "string", False, "vault secret (inject: proxy only): the KV v2 path."),
        Key("field", "string", False, "vault secret: the field of that path whose value is the secret."),
        Key("hosts", "list", False, "vault secret: HOST:PORT it goes to (1 to 16, each in network.allow)."),
        Key("header", "string", False, 'vault secret: the header it goes in, "NAME: text with {}" ({} = it).'),
        Key("env", "NAME", False, "vault secret: the variable holding its placeholder (never the secret)."),
        Key("policies", "list", False, "vault token: Vault policy names (never root)."),
        Key("num_uses", "integer", False, "vault token: uses before the token dies; 0 = unlimited.", "0"),
        Key("role", "string", False, "vault database, pki, ssh: the secrets engine's role."),
        Key("common_name", "DNS name", False, "vault pki: the certificate's common name."),
        Key("alt_names", "list", False, "vault pki: DNS subject alternative names (at most 16)."),
        Key("principals", "list", False, "vault ssh: user names the certificate is valid for (1 to 16)."),
    ),
    grant=(
        Key("policies", "list", False, "vault: policy name globs a token request may name."),
        Key("max_uses", "integer", False, "vault: num_uses must be 1..max_uses (unlimited is denied)."),
        Key("database_roles", "list", False, "vault: database role globs (kind: database); none = denied."),
        Key("pki_roles", "list", False, "vault: pki role globs (kind: pki); none = denied."),
        Key(
            "common_names",
            "list",
            False,
            "vault: DNS name globs the common name and every alt name must match (* stays within one label).",
        ),
        Key("ssh_roles", "list", False, "vault: ssh role globs (kind: ssh); none = denied."),
        Key("principals", "list", False, "vault: principal globs every requested principal must match."),
        Key("secret_paths", "list", False, "vault: KV path globs kind: secret may read (* stops at /)."),
        Key("secret_hosts", "list", False, "vault: HOST:PORT globs such secrets may go to; none = denied."),
        Key(
            "secret_headers",
            "list",
            False,
            'vault: header templates such secrets may go in; none = only "Authorization: Bearer {}".',
        ),
    ),
    hints=(
        Hint("VAULT_ADDR", "vault token", "The Vault address (with inject: proxy, the first proxy host over https)."),
        Hint("PGPASSFILE", "vault database", "The one-line pgpass file; never PGPASSWORD."),
        Hint("PGUSER", "vault database", "The minted user name."),
        Hint("PGHOST", "vault database", "From database_hint_host, when set."),
        Hint("PGPORT", "vault database", "From database_hint_port, when set."),
        Hint("PGDATABASE", "vault database", "From database_hint_database, when set."),
        Hint("BROKER_<NAME>_CERT", "vault pki", "The certificate, <name>/cert.pem."),
        Hint("BROKER_<NAME>_KEY", "vault pki", "Its private key, <name>/key.pem (0400)."),
        Hint(
            "BROKER_<NAME>_CA",
            "vault pki",
            "The issuing CA chain, <name>/ca.pem. Never SSL_CERT_FILE: it would replace the system CAs of every TLS"
            " client in the sandbox; point a client at it yourself (e.g. PGSSLCERT, PGSSLKEY, PGSSLROOTCERT).",
        ),
        Hint("GIT_SSH_COMMAND", "vault ssh", "ssh -F <name>/ssh_config (IdentityFile and CertificateFile)."),
    ),
)
