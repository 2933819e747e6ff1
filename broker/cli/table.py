"""The command table: every command of ``broker``, its options and its help, written once.

Both command lines are made from it: ``broker.cli.parsing`` (the small parser
every command runs through, the daemon's thin client included) and
``broker.cli.typed`` (the typer application: help pages, shell completion and
any command line the small parser leaves to it). A command names its handler
``module:function``; only the chosen command's module is imported
(``broker.cli.app``). ``daemon`` marks the commands a configured ``broker
serve`` answers (``broker.client``).

This module is on the thin client's cold path: plain values of the classes
``broker.cli.declaring`` defines, and the standard library's nothing.
"""

from __future__ import annotations

from broker.cli.declaring import ARGUMENT, CHOICE, FLAG, MANY, PATH, REST, WORD, Command, Group, Option

PROGRAM_HELP = "Scoped-credential broker: short-lived, narrow credentials for sandboxed agents."
CONFIG_ENV = "BROKER_CONFIG"
DEFAULT_CONFIG = "/etc/broker/broker.toml"
LOG_FORMATS = ("text", "json")

GLOBAL_OPTIONS = (
    Option("config", "--config", envvar=CONFIG_ENV, help=f"Config file [default: {DEFAULT_CONFIG}]."),
    Option("debug", "--debug", kind=FLAG, help="Show tracebacks for internal errors."),
    Option("verbose", "--verbose", "-v", kind=FLAG, help="Log the policy decision and every provider call to stderr."),
    Option(
        "log_format", "--log-format", kind=CHOICE, choices=LOG_FORMATS, default="text", help="Format of stderr logs."
    ),
)
VERSION_HELP = "Print the version and exit."


def _flag(dest: str, flag: str, what: str) -> Option:
    return Option(dest, flag, kind=FLAG, help=what)


def _path(dest: str, flag: str, what: str, default: str | None = None) -> Option:
    return Option(dest, flag, kind=PATH, default=default, help=what)


def _json(what: str) -> Option:
    return _flag("as_json", "--json", what)


def _session(what: str, *, required: bool = False) -> Option:
    return Option("session", "--session", required=required, help=what)


def _request() -> Option:
    return Option(
        "request", kind=WORD, required=True, metavar="REQUEST", help="The request id (broker approvals lists them)."
    )


def _waiting() -> tuple[Option, Option]:
    """--wait and --no-wait: what issue and exec do when a person must approve the session first."""
    return (
        Option("wait", "--wait", help="When an approval is needed: how long to wait for it [default: its timeout]."),
        _flag("no_wait", "--no-wait", "When an approval is needed: exit 8 with the request id at once."),
    )


def _network(verb: str, summary: str) -> Command:
    """``session allow`` or ``session disallow``: one destination of a running session's allow-list."""
    example = f"Example: broker session {verb} --session s-4k2j9x7q3m1p pypi.org:443"
    destination = Option(
        "destination", kind=WORD, required=True, metavar="HOST:PORT", help="HOST:PORT, *.SUFFIX:PORT or [IPv6]:PORT."
    )
    session = _session("Session id (its exec must be running).", required=True)
    options = (session, destination, _json("Print the change as JSON."))
    return Command(("session", verb), f"{SESSIONS}.network:{verb}", f"{summary}\n\n{example}", options, daemon=True)


def _log() -> Option:
    return Option("log", "--log", kind=PATH, help="Log file [default: the config's].")


def _no_verify() -> Option:
    return Option("no_verify", "--no-verify", kind=FLAG, help="Read the log without checking its chain.")


SESSIONS = "broker.cli.sessions"
AUDIT = "broker.cli.audit"
FORMATS = ("json", "env", "docker", "podman", "bwrap")

COMMANDS = (
    Command(
        ("init",),
        "broker.cli.ops.init:init",
        "Write a commented config, an example policy, the audit keys and the broker's directories.\n\n"
        "Refuses to overwrite an existing file without --force (exit 2); never regenerates an existing audit key.\n"
        "Example: broker init --dir /etc/broker --state-dir /var/lib/broker --runtime-dir /run/broker",
        (
            _path(
                "directory", "--dir", "Config directory: broker.toml, policies/ and audit.key go here.", "/etc/broker"
            ),
            _path("state_dir", "--state-dir", "Session store and issuance log (no secrets).", "/var/lib/broker"),
            _path("runtime_dir", "--runtime-dir", "Per-session tmpfs directories (the credentials).", "/run/broker"),
            _flag("force", "--force", "Overwrite broker.toml and the example policy (the audit key is kept)."),
        ),
    ),
    Command(
        ("doctor",),
        "broker.cli.ops.doctor:doctor",
        "Check the installation: config, policy, runtime and state directories, audit key, every provider.\n\n"
        "One line per check, ✓ or ✗ with what to fix; nothing is minted. Exit 0 when every check passes, 2 otherwise.\n"
        "Example: broker doctor --json",
        (_json("Print the checks as JSON."),),
    ),
    Command(
        ("serve",),
        "broker.cli.ops.serve:serve",
        "Run the broker as a daemon: HTTP/1.1 + JSON on a Unix socket, the caller named by the kernel.\n\n"
        "Sweeps every [daemon] sweep_interval; on SIGTERM stops accepting, finishes what is in flight and exits.\n"
        "Under systemd, scripts/systemd/broker.socket hands it the socket."
        " Example: broker serve --socket /run/broker.sock",
        (_path("socket", "--socket", "Unix socket [default: [daemon] socket or runtime_dir/broker.sock]."),),
    ),
    Command(
        ("issue",),
        f"{SESSIONS}.issue:issue",
        "Decide, mint, inject and log the credentials a task manifest asks for.\n\n"
        "A rule may need a person's approval first: issue shows the request id and digest and waits (exit 8 with\n"
        "--no-wait, or when the wait ends first; issue --resume REQUEST collects it once approved).\n"
        "Example: broker issue --task task.yaml --format docker --session-file /tmp/session",
        (
            Option("task", "--task", help="Task manifest (YAML or JSON; - for stdin)."),
            _json("Print the session document as JSON."),
            Option("fmt", "--format", kind=CHOICE, choices=FORMATS, help="What to print for the launcher."),
            Option("session_file", "--session-file", kind=PATH, help="Also write the session id to this file."),
            *_waiting(),
            Option("resume", "--resume", help="Collect the session of an approved request (instead of --task)."),
        ),
        daemon=True,
    ),
    Command(
        ("revoke",),
        f"{SESSIONS}.revoke:revoke",
        "Revoke every credential of a session at its provider and wipe its directory (idempotent).\n\n"
        "Example: broker revoke --session s-4k2j9x7q3m1p",
        (
            _session("Session id to revoke."),
            Option("task", "--task", help="Revoke every live session of this task."),
            _json("Print the outcome as JSON."),
        ),
        daemon=True,
    ),
    Command(
        ("status",),
        f"{SESSIONS}.status:status",
        "List live sessions (with --all, ended ones too).\n\nExample: broker status --json",
        (_json("Print JSON."), Option("show_all", "--all", kind=FLAG, help="Include ended sessions.")),
        daemon=True,
    ),
    Command(
        ("renew",),
        f"{SESSIONS}.renew:renew",
        "Re-mint credentials that expire before their session (GitHub's hour), swap the files, revoke the old ones.\n"
        "A session with inject: proxy credentials is asked through its running exec, which renews them now behind\n"
        "their placeholders (a kind: secret: its current KV version).\n\n"
        "Example: broker renew --session s-4k2j9x7q3m1p",
        (
            _session("Session whose short-lived credentials to re-mint.", required=True),
            _json("Print the renewals as JSON."),
        ),
        daemon=True,
    ),
    Command(
        ("exec",),
        f"{SESSIONS}.executing:run",
        "Issue, run CMD with only its scoped credentials, revoke when it ends; exit with CMD's status.\n\n"
        "CMD gets a clean environment: PATH, HOME, LANG, TERM, the session's hints and the manifest's sandbox.env.\n"
        "Example: broker exec --task task.yaml --sandbox bwrap --workspace ./repo -- make test",
        (
            Option(
                "command", kind=REST, required=True, metavar="-- CMD ARGS...", help="The command to run (after --)."
            ),
            Option("task", "--task", required=True, help="Task manifest (YAML or JSON)."),
            Option(
                "sandbox",
                "--sandbox",
                kind=CHOICE,
                choices=("none", "bwrap"),
                default="bwrap",
                help="Run CMD in bubblewrap, or on the host.",
            ),
            Option(
                "network",
                "--network",
                kind=CHOICE,
                choices=("none", "host", "allowlist"),
                show_default=False,
                help="Network inside the sandbox"
                " [default: allowlist when the manifest has a network section, else none].",
            ),
            _path("workspace", "--workspace", "Directory bound read-write at /workspace [default: a tmpfs]."),
            Option("read_only", "--ro-bind", kind=MANY, help="Extra host path bound read-only at the same path."),
            *_waiting(),
        ),
        daemon=True,
        interspersed=False,
    ),
    _network("allow", "Let a running session reach HOST:PORT now, if its rule's network covers it (exit 3 if not)."),
    _network("disallow", "Refuse HOST:PORT to every connection a running session opens from now on."),
    Command(
        ("sweep",),
        f"{SESSIONS}.sweep:sweep",
        "Revoke expired sessions, retry pending revocations, finish what a crash left, remove orphans.\n\n"
        "Only provable broker session directories are removed; anything else in runtime_dir is listed as foreign\n"
        "and left alone; a malformed row of the store is listed as malformed and skipped.\n"
        "Run it every minute (scripts/systemd/broker-sweep.timer). Exit 5 while something stays pending.\n"
        "Example: broker sweep --json",
        (_json("Print what was done as JSON."),),
    ),
    Command(
        ("approvals",),
        f"{SESSIONS}.approvals:approvals",
        "List the approval requests waiting for a decision: what each would mint, who may approve, its digest.\n\n"
        "Example: broker approvals",
        (_json("Print the requests as JSON."),),
        daemon=True,
    ),
    Command(
        ("approve",),
        f"{SESSIONS}.approvals:approve",
        "Approve a request with the digest you were shown: the approval binds to exactly that request.\n\n"
        "You must be one of its approvers (by uid or group) and not its requester.\n"
        "Example: broker approve s-4k2j9x7q3m1p --digest 3f5e...",
        (
            _request(),
            Option("digest", "--digest", required=True, help="The request's SHA-256 digest, as you were shown it."),
            _json("Print the decided request as JSON."),
        ),
        daemon=True,
    ),
    Command(
        ("deny",),
        f"{SESSIONS}.approvals:deny",
        "Deny a request (or, as its requester, withdraw it): nothing is minted for it.\n\n"
        'Example: broker deny s-4k2j9x7q3m1p --reason "not during the freeze"',
        (
            _request(),
            Option("reason", "--reason", help="Why, for the requester and the log."),
            _json("Print the decided request as JSON."),
        ),
        daemon=True,
    ),
    Command(
        ("policy", "check"),
        "broker.cli.checking:check",
        "The decision for a manifest, without minting anything (exit 0 allowed, 3 denied).\n\n"
        "Example: broker policy check --task task.yaml",
        (
            Option("task", "--task", required=True, help="Task manifest to decide on."),
            _json("Print the decision as JSON."),
        ),
        daemon=True,
    ),
    Command(
        ("policy", "lint"),
        "broker.cli.checking:lint",
        "Validate policy files (syntax, fields, provider instances the config defines).\n\n"
        "Example: broker policy lint /etc/broker/policies",
        (Option("directory", kind=ARGUMENT, help="Policy directory [default: the config's policy_dir]."),),
    ),
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

GROUPS = (
    Group("session", "Change a running session's egress allow-list."),
    Group("policy", "Check manifests against the policy; lint policy files."),
    Group("audit", "Verify and read the issuance log."),
)
