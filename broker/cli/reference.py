"""The config, manifest and policy reference: one table per section, rendered to docs/reference.md.

Every key a loader reads is listed here and nothing else: a test loads
documents through the real loaders, records the keys they read, and compares
them with these tables; another test regenerates docs/reference.md and
compares it with the committed file. So neither the docs nor this table can
drift from the code. The session environment's hints are in
``broker.cli.reference_env``.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.cli.reference_env import render_hints
from broker.egress.operations.keys import SECTIONS as OPERATIONS_SECTIONS


@dataclass(frozen=True)
class Key:
    name: str
    kind: str
    required: bool
    description: str
    default: str = ""


@dataclass(frozen=True)
class Section:
    title: str
    path: str  # the document path the loaders read these keys at ("" for the top level)
    keys: tuple[Key, ...]
    intro: str = ""


DURATION = "duration"


def operations_sections(title: str, path: str) -> tuple[Section, ...]:
    """The ``operations`` tables (``broker.egress.operations.keys``) as read at ``path``."""
    return tuple(
        Section(f"{title}: {suffix}", path + below, tuple(Key(*key) for key in keys), intro)
        for suffix, below, keys, intro in OPERATIONS_SECTIONS
    )


CONFIG = (
    Section(
        "Config: top level",
        "",
        (
            Key(
                "state_dir",
                "path",
                False,
                "Session store and issuance log (persistent, no secrets). A directory of its own: not a"
                " shared system directory (/, /run, /tmp, /var/run, /dev/shm, /var/tmp) or a home directory.",
                "/var/lib/broker",
            ),
            Key(
                "runtime_dir",
                "path",
                False,
                "Per-session tmpfs directories. A directory of its own, like state_dir: sweep removes the"
                " session directories it finds there and reports anything else as foreign.",
                "/run/broker",
            ),
            Key("policy_dir", "path", False, "Directory of *.yaml policy files.", "/etc/broker/policies"),
            Key(
                "audit_key",
                "path",
                False,
                "Ed25519 key that signs checkpoints; created 0400 on first use.",
                "/etc/broker/audit.key",
            ),
            Key(
                "fingerprint_key",
                "path",
                False,
                "HMAC key for fingerprints and audit lookup; created 0400 on first use.",
                "fingerprint.key beside audit_key",
            ),
            Key("default_ttl", DURATION, False, "Session lifetime when the manifest gives none.", "30m"),
            Key("max_ttl", DURATION, False, "Ceiling for every session and credential.", "12h"),
            Key(
                "mount_tmpfs",
                "auto | always | never",
                False,
                "auto: a tmpfs per session when the broker holds CAP_SYS_ADMIN (else runtime_dir must be tmpfs);"
                " never: runtime_dir itself must be tmpfs.",
                "auto",
            ),
            Key(
                "store",
                "postgresql://USER@HOST[:PORT]/DB",
                False,
                "Fleet mode: sessions, credential states, locks, AWS deny entries and the issuance log (one hash"
                " chain) in one PostgreSQL database shared by brokers on many hosts; no password in the URL.",
                "SQLite in state_dir",
            ),
            Key("store_passfile", "path", False, "The pgpass file (mode 0600) holding the store's password."),
            Key(
                "host",
                "string",
                False,
                "This broker's name in the fleet; only it touches its sessions' directories.",
                "the hostname",
            ),
            Key("providers", "table", False, "One [providers.NAME] table per provider instance."),
            Key("audit", "table", False, "[audit]: the issuance log's witness."),
            Key("daemon", "table", False, "[daemon]: broker serve, and the CLI as its thin client."),
            Key("egress", "table", False, "[egress]: the session proxy's upstream trust."),
        ),
        "Relative paths are relative to the config file. Durations: 90s, 15m, 1h or whole seconds.",
    ),
    Section(
        "Config: [audit]",
        "audit",
        (
            Key("witness", "s3://BUCKET/PREFIX", False, "Every checkpoint is also written there under Object Lock."),
            Key("witness_endpoint_url", "URL", False, "S3 endpoint (moto, MinIO, VPC endpoints)."),
            Key("witness_region", "string", False, "The bucket's region; the default chain otherwise."),
            Key("witness_profile", "string", False, "AWS profile that may write the bucket; default chain otherwise."),
            Key("witness_retention", "duration (d allowed)", False, "COMPLIANCE retention of each object.", "400d"),
            Key(
                "witness_interval",
                "duration (d allowed)",
                False,
                "0s: every checkpoint; else only the newest, at most once per interval.",
                "0s",
            ),
        ),
        "The bucket must have Object Lock enabled; the broker's identity needs s3:PutObject and"
        " s3:PutObjectRetention on PREFIX, auditors s3:ListBucketVersions.",
    ),
    Section(
        "Config: [egress]",
        "egress",
        (
            Key(
                "upstream_ca_file", "path", False, "CA bundle the proxy checks operations-only hosts against.", "system"
            ),
        ),
        "A credential's own hosts keep their provider's upstream_ca_file.",
    ),
    Section(
        "Config: [daemon]",
        "daemon",
        (
            Key(
                "socket",
                "path",
                False,
                "Where broker serve listens; when set, issue, revoke, status, renew and policy check go through it"
                " (as with BROKER_SOCKET) and exit 7 when it cannot be reached.",
                "runtime_dir/broker.sock (for broker serve only)",
            ),
            Key("socket_group", "group name or number", False, "Group of the 0660 socket.", "the daemon's group"),
            Key("sweep_interval", DURATION, False, "How often the daemon sweeps.", "60s"),
        ),
        "The daemon reads the provider credentials; its clients need only the socket"
        " (and this file, or BROKER_SOCKET).",
    ),
    Section(
        'Config: [providers.NAME] type = "vault"',
        "providers.vault",
        (
            Key("type", '"vault"', True, "Vault or OpenBao."),
            Key("addr", "URL", True, "https://host[:port]; http only for 127.0.0.0/8, ::1 or localhost."),
            Key("token_file", "path", False, "The broker's own token (mode 0600); or the two AppRole files."),
            Key("approle_role_id_file", "path", False, "AppRole role id file, with approle_secret_id_file."),
            Key("approle_secret_id_file", "path", False, "AppRole secret id file (mode 0600)."),
            Key("approle_mount", "string", False, "Mount path of the AppRole auth method.", "approle"),
            Key("namespace", "string", False, "Vault Enterprise / OpenBao namespace."),
            Key("token_role", "string", False, "Orphan=true token role to mint through; else create-orphan."),
            Key("timeout", "seconds", False, "HTTP timeout.", "10"),
            Key("database_mount", "string", False, "Mount path of the database secrets engine.", "database"),
            Key("pki_mount", "string", False, "Mount path of the pki secrets engine.", "pki"),
            Key("ssh_mount", "string", False, "Mount path of the ssh secrets engine (a CA).", "ssh"),
            Key("secret_mount", "string", False, "Mount path of the KV v2 engine kind: secret reads.", "secret"),
            Key("proxy_hosts", "list", False, "HOST:PORT where inject: proxy puts this provider's secret in."),
            Key("upstream_ca_file", "path", False, "CA bundle the proxy checks those hosts against.", "the system's"),
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
    ),
    Section(
        'Config: [providers.NAME] type = "aws_sts"',
        "providers.aws",
        (
            Key("type", '"aws_sts"', True, "AWS STS AssumeRole."),
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
                "shared_role_writers",
                "boolean",
                False,
                "true when brokers on several hosts revoke on the same roles: wait for IAM to settle.",
                "false",
            ),
        ),
    ),
    Section(
        'Config: [providers.NAME] type = "github_app"',
        "providers.github",
        (
            Key("type", '"github_app"', True, "GitHub App installation tokens."),
            Key("app_id", "digits", True, "The App's numeric id."),
            Key("private_key_file", "path", True, "The App's RSA private key (PEM, mode 0600)."),
            Key("api_url", "URL", False, "GitHub Enterprise Server: https://HOST/api/v3.", "https://api.github.com"),
            Key("timeout", "seconds", False, "HTTP timeout.", "10"),
            Key("proxy_hosts", "list", False, "HOST:PORT where inject: proxy puts this provider's secret in."),
            Key("upstream_ca_file", "path", False, "CA bundle the proxy checks those hosts against.", "the system's"),
        ),
    ),
)

DESTINATION = "HOST:PORT, *.SUFFIX:PORT (two labels or more), IP:PORT or [IPv6]:PORT"

MANIFEST = (
    Section(
        "Manifest: top level",
        "",
        (
            Key("version", "1", True, "Manifest format version."),
            Key("task", "name", True, "[a-z0-9][a-z0-9._-]{0,62}; policies match it with globs."),
            Key("ttl", DURATION, False, "Session lifetime; capped by policy and config.", "default_ttl"),
            Key("sandbox", "table", False, "Who owns the files and where they are mounted."),
            Key("network", "table", False, "What the sandbox may reach (exec --network allowlist).", "none"),
            Key("operations", "table", False, "Narrows the rule's operations (the same shape).", "the rule's"),
            Key("credentials", "list", True, "1 to 64 credentials."),
        ),
        "Untrusted input: unknown keys, duplicate keys, YAML tags, anchors and aliases are refused (exit 2).",
    ),
    Section(
        "Manifest: sandbox",
        "sandbox",
        (
            Key("uid", "integer", False, "Owner of the files; uid 0 needs allow_root_sandbox.", "the caller"),
            Key("gid", "integer", False, "Group of the files.", "the caller"),
            Key("env", "table", False, "Extra non-secret variables for broker exec (secret-looking names refused)."),
            Key("mount_path", "path", False, "Where the launcher mounts the session directory.", "/run/secrets"),
        ),
    ),
    Section(
        "Manifest: network",
        "network",
        (Key("allow", "list", True, f"1 to 200 destinations, {DESTINATION}; a rule's network must cover each."),),
        "Anything else is refused (exit 2): upper case, a trailing dot, non-ASCII (use xn--), user info, paths.",
    ),
    Section(
        "Manifest: credentials[] (every provider)",
        "credentials[]",
        (
            Key("name", "name", True, "[a-z0-9][a-z0-9_-]{0,31}; also its sub-directory; unique."),
            Key("provider", "string", True, "A provider instance of the config."),
            Key("ttl", DURATION, False, "At most the session's ttl.", "the session's"),
            Key("kind", "token | database | pki | ssh | secret", False, "vault: what to mint or read.", "token"),
            Key("inject", "file | proxy", False, "proxy: the files hold a placeholder, the proxy the secret.", "file"),
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
            Key("role_arn", "ARN", False, "aws_sts: the role to assume."),
            Key("session_policy", "IAM policy", False, "aws_sts: inline policy narrowing the role."),
            Key("policy_arns", "list", False, "aws_sts: managed policies narrowing the role (same account)."),
            Key("repositories", "list", False, "github_app: owner/name, one owner, 1 to 500."),
            Key("permissions", "table", False, "github_app: permission name -> read | write | admin."),
        ),
    ),
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
    *operations_sections("Manifest", "operations"),
)

POLICY = (
    Section(
        "Policy file: top level",
        "",
        (Key("rules", "list", True, "1 to 1000 rules; every *.yaml file in policy_dir is loaded."),),
    ),
    Section(
        "Policy file: rules[]",
        "rules[]",
        (
            Key("id", "string", True, "Unique across all policy files."),
            Key("description", "string", False, "What the rule is for."),
            Key("tasks", "list", True, "Globs on the task name (* stops at /)."),
            Key("requesters", "list", False, "User name globs or uid:N of the caller.", "anyone"),
            Key("max_ttl", DURATION, False, "Cap for sessions this rule allows."),
            Key("sandbox_uids", "list", False, 'Sandbox uids allowed: integers or "A-B" ranges.', "none"),
            Key("sandbox_gids", "list", False, 'Sandbox gids allowed: integers or "A-B" ranges.', "none"),
            Key("allow_root_sandbox", "boolean", False, "Allow a sandbox uid/gid of 0.", "false"),
            Key("network", "list", False, f"Destinations sessions may ask for: {DESTINATION}.", "none"),
            Key("operations", "table", False, "What sessions may do on their hosts (git, github_api, http)."),
            Key("grants", "list", True, "What the rule allows, per provider instance."),
        ),
        "Deny by default: every credential must be covered by a grant of a rule matching task and requester.",
    ),
    Section(
        "Policy file: rules[].grants[]",
        "rules[].grants[]",
        (
            Key("provider", "string", True, "A provider instance of the config."),
            Key("max_ttl", DURATION, False, "Cap for credentials of this grant."),
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
            Key("roles", "list", False, "aws_sts: role ARN globs (IAM-style *)."),
            Key("actions", "list", False, "aws_sts: what a session policy may Allow (containment, case-insensitive)."),
            Key("resources", "list", False, "aws_sts: resource patterns Allow statements must stay within."),
            Key("require_session_policy", "boolean", False, "aws_sts: refuse requests without one.", "false"),
            Key("policy_arns", "list", False, "aws_sts: managed policy ARN globs a request may attach."),
            Key("repositories", "list", False, "github_app: owner/name globs."),
            Key("permissions", "table", False, "github_app: permission -> highest level (none<read<write<admin)."),
        ),
    ),
    *operations_sections("Policy file", "rules[].operations"),
)


def render() -> str:
    lines = [
        "# Reference",
        "",
        "Generated from `broker/cli/reference.py` by `scripts/gen-reference`; a test keeps it equal to the",
        "keys the loaders really read. Do not edit by hand.",
    ]
    for part, sections in (("Operator config (TOML)", CONFIG), ("Task manifest", MANIFEST), ("Policy files", POLICY)):
        lines += ["", f"## {part}"]
        for section in sections:
            lines += ["", f"### {section.title}", ""]
            if section.intro:
                lines += [section.intro, ""]
            lines += ["| key | type | required | default | meaning |", "|---|---|---|---|---|"]
            for key in section.keys:
                required = "yes" if key.required else "no"
                kind = key.kind.replace("|", "\\|")
                text = key.description.replace("|", "\\|")
                lines.append(f"| `{key.name}` | {kind} | {required} | {key.default} | {text} |")
    return "\n".join(lines + render_hints()) + "\n"
