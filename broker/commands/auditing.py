"""The auditor's commands of the table (``broker audit ...``): reading and checking the issuance log, its keys,
a fleet's export. None is answered by the daemon: an auditor reads the log where it lies, with the public key
alone. ``broker.commands.table`` lists them after the others."""

from __future__ import annotations

from broker.commands.declaring import FLAG, PATH, Command, Option

AUDIT = "broker.cli.audit"


def _json(what: str) -> Option:
    return Option("as_json", "--json", kind=FLAG, help=what)


def _session(what: str) -> Option:
    return Option("session", "--session", help=what)


def _log() -> Option:
    return Option("log", "--log", kind=PATH, help="Log file [default: the config's].")


def _no_verify() -> Option:
    return Option("no_verify", "--no-verify", kind=FLAG, help="Read the log without checking its chain.")


AUDIT_COMMANDS = (
    Command(
        ("audit", "verify"),
        f"{AUDIT}.verifying:verify",
        "Check the hash chain, the signed checkpoints and the witness; exit 6 naming the first bad seq.\n\n"
        "Example: broker audit verify --log issuance.jsonl --public-key broker.pub --strict",
        (
            Option("log", "--log", kind=PATH, help="Log file [default: the config's state_dir log]."),
            Option("public_key", "--public-key", kind=PATH, help="Public key file from 'broker audit public-key'."),
            Option("expect_head", "--expect-head", help="SEQ:HASH of a record noted earlier; the log must hold it."),
            Option("strict", "--strict", kind=FLAG, help="Fail when records follow the newest checkpoint."),
            Option(
                "witness",
                "--witness",
                help="s3://BUCKET/PREFIX holding witnessed checkpoints; the log must match them.",
            ),
            Option("witness_endpoint_url", "--witness-endpoint-url", help="S3 endpoint [default: the config's]."),
            Option("witness_region", "--witness-region", help="Bucket region."),
            Option("witness_profile", "--witness-profile", help="AWS profile to read it."),
            Option("store", "--store", help="postgresql://USER@HOST/DB: the fleet's log, checked in place."),
            Option("repair", "--repair", kind=FLAG, help="Cut a torn last record left by a crash."),
            _json("Print the result as JSON."),
        ),
    ),
    Command(
        ("audit", "list"),
        f"{AUDIT}.reading:list_records",
        "Read the log as an auditor, filtered.\n\n"
        "With --event egress.request the table shows each request a session made through its proxy (credential,\n"
        "method, host, path, decision, rule, status); --json gives every field, the hashes included.\n\n"
        "Example: broker audit list --task fix-build-123 --since 2026-11-29T00:00:00Z",
        (
            _session("Only this session."),
            Option("task", "--task", help="Only this task."),
            Option("provider", "--provider", help="Only this provider instance."),
            Option("event", "--event", help="Only this event, e.g. credential.issued."),
            Option("since", "--since", help="From this time (RFC 3339)."),
            Option("until", "--until", help="Up to this time (RFC 3339)."),
            _log(),
            _json("JSON lines."),
            Option("as_csv", "--csv", kind=FLAG, help="CSV with a header row."),
        ),
    ),
    Command(
        ("audit", "lookup"),
        f"{AUDIT}.reading:lookup",
        "Find the session, task and credential that minted a leaked secret (never echoes it).\n\n"
        "Example: broker audit lookup --secret-file leaked-token.txt",
        (
            Option("secret_file", "--secret-file", kind=PATH, help="File holding the leaked secret."),
            Option("secret_stdin", "--secret-stdin", kind=FLAG, help="Read the leaked secret from stdin."),
            _log(),
            _no_verify(),
            _json("Print JSON."),
        ),
    ),
    Command(
        ("audit", "active"),
        f"{AUDIT}.reading:active",
        "Credentials live now (issued, not revoked, not expired): who can do what right now.\n\n"
        "Example: broker audit active --json",
        (_log(), _no_verify(), _json("Print JSON.")),
    ),
    Command(
        ("audit", "public-key"),
        f"{AUDIT}.keys:public_key",
        "Print the public keys auditors verify checkpoints with: current, then retired (a fleet: every host's).\n\n"
        "Example: broker audit public-key > broker.pub",
    ),
    Command(
        ("audit", "rotate-key"),
        f"{AUDIT}.keys:rotate_key",
        "Replace one audit key; older checkpoints stay verifiable and older fingerprints searchable.\n\n"
        "Example: broker audit rotate-key --key signing && broker audit public-key > broker.pub",
        (
            Option(
                "which",
                "--key",
                default="signing",
                help="signing (audit_key, signs checkpoints) or fingerprint (fingerprint_key).",
            ),
        ),
    ),
    Command(
        ("audit", "migrate-keys"),
        f"{AUDIT}.keys:migrate_keys",
        "Split an older one-file audit key into audit_key (signing) and fingerprint_key (HMAC).\n\n"
        "Example: broker audit migrate-keys",
    ),
    Command(
        ("audit", "export"),
        f"{AUDIT}.fleet:export",
        "Write the fleet's issuance log as JSON lines, for an offline 'broker audit verify --log'.\n\n"
        "Example: broker audit export --output issuance.jsonl",
        (
            Option("output", "--output", kind=PATH, help="Write to this file (mode 0600) [default: stdout]."),
            Option("store", "--store", help="postgresql://USER@HOST/DB [default: the config's store]."),
        ),
    ),
)
