"""The command table: every command of ``broker``, its options and its help, written once.

Both command lines are made from it: ``broker.cli.parsing`` (the small parser
every command runs through, the daemon's thin client included) and
``broker.cli.typed`` (the typer application: help pages, shell completion and
any command line the small parser leaves to it). A command names its handler
``module:function``; only the chosen command's module is imported
(``broker.cli.app``). ``daemon`` marks the commands a configured ``broker
serve`` answers, each with its endpoints (``Route``: the daemon's dispatch is
made from them, ``broker.daemon.routes``), its thin client's call
(``broker.client``) and its renderer (``broker.cli.render`` and the like),
which the direct command prints with too.

This module is on the thin client's cold path: plain values of the classes
``broker.commands.declaring`` defines, and the standard library's nothing.
"""

from __future__ import annotations

from broker.commands.auditing import AUDIT_COMMANDS
from broker.commands.declaring import ARGUMENT, CHOICE, FLAG, MANY, PATH, REST, WORD, Command, Group, Option, Route

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
    return Command(
        ("session", verb),
        f"{SESSIONS}.network:{verb}",
        f"{summary}\n\n{example}",
        options,
        daemon=True,
        routes=(_sessions("POST", "/v1/sessions/{id}/network", "network"),),
        call=f"{CALLS}:{verb}",
        render=f"{RENDER}:network",
    )


def _sessions(method: str, path: str, answer: str) -> Route:
    return Route(method, path, f"{ENDPOINTS}.sessions:{answer}")


def _approvals(method: str, path: str, answer: str) -> Route:
    return Route(method, path, f"{ENDPOINTS}.approvals:{answer}")


def _published(word: str, path: str, summary: str, example: str) -> Command:
    """``identity jwks|discovery|revoked``: a document the issuer publishes, printed as JSON; the daemon answers it
    at its well-known path, as any listener serving the issuer does (``broker.core.identity.wellknown``)."""
    return Command(
        ("identity", word),
        f"{IDENTITY}:{word}",
        f"{summary}\n\nExample: broker identity {word}{example}",
        daemon=True,
        routes=(Route("GET", path, f"{ENDPOINTS}.identity:published"),),
        call=f"{CALLS}:published",
        render=f"{RENDER}:published",
    )


SESSIONS = "broker.cli.sessions"
IDENTITY = "broker.cli.ops.identity"
ENDPOINTS = "broker.daemon.endpoints"  # the daemon's functions answering each route
CALLS = "broker.client.calls"  # the thin client's one-request calls
RENDER = "broker.cli.render"
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
        "With --gateway the daemon's gateway holds the session until it is revoked or expires, serving its egress\n"
        "(inject: proxy credentials as placeholders) to requests carrying its proxy credential (proxy/credential).\n"
        "Example: broker issue --task task.yaml --format docker --session-file /tmp/session",
        (
            Option("task", "--task", help="Task manifest (YAML or JSON; - for stdin)."),
            _json("Print the session document as JSON."),
            Option("fmt", "--format", kind=CHOICE, choices=FORMATS, help="What to print for the launcher."),
            Option("session_file", "--session-file", kind=PATH, help="Also write the session id to this file."),
            *_waiting(),
            Option("resume", "--resume", help="Collect the session of an approved request (instead of --task)."),
            _flag("gateway", "--gateway", "Have broker serve's gateway hold the session (its egress proxy)."),
        ),
        daemon=True,
        routes=(
            _sessions("POST", "/v1/sessions", "issue"),
            Route("POST", "/v1/gateway/sessions", f"{ENDPOINTS}.gateway:issue"),
            _approvals("POST", "/v1/approvals/{id}/wait", "wait"),
            _approvals("POST", "/v1/approvals/{id}/collect", "collect"),
        ),
        call="broker.client.issuing:issue",
        render=f"{SESSIONS}.launch_formats:show",
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
        routes=(
            _sessions("DELETE", "/v1/sessions/{id}", "revoke"),
            _sessions("DELETE", "/v1/sessions", "revoke_task"),
        ),
        call=f"{CALLS}:revoke",
        render=f"{RENDER}:revoked",
    ),
    Command(
        ("status",),
        f"{SESSIONS}.status:status",
        "List live sessions (with --all, ended ones too).\n\nExample: broker status --json",
        (_json("Print JSON."), Option("show_all", "--all", kind=FLAG, help="Include ended sessions.")),
        daemon=True,
        routes=(_sessions("GET", "/v1/sessions", "status"),),
        call=f"{CALLS}:status",
        render=f"{RENDER}:status",
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
        routes=(_sessions("POST", "/v1/sessions/{id}/renew", "renew"),),
        call=f"{CALLS}:renew",
        render=f"{RENDER}:renewed",
    ),
    Command(
        ("exec",),
        f"{SESSIONS}.executing:run",
        "Issue, run CMD with only its scoped credentials, revoke when it ends; exit with CMD's status.\n\n"
        "CMD gets a clean environment: PATH, HOME, LANG, TERM, the session's hints and the manifest's sandbox.env.\n"
        "Example: broker exec --task task.yaml --sandbox bwrap --workspace ./repo -- make test\n"
        "Example: broker exec --task task.yaml --sandbox podman --image localhost/agent:1 -- make test",
        (
            Option(
                "command", kind=REST, required=True, metavar="-- CMD ARGS...", help="The command to run (after --)."
            ),
            Option("task", "--task", required=True, help="Task manifest (YAML or JSON)."),
            Option(
                "sandbox",
                "--sandbox",
                kind=CHOICE,
                choices=("none", "bwrap", "podman", "docker"),
                default="bwrap",
                help="Run CMD in bubblewrap, in a container of --image (rootful podman or docker), or on the host.",
            ),
            Option("image", "--image", help="The container's image, one the engine has (exec never pulls)."),
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
        routes=(
            Route("POST", "/v1/exec", f"{ENDPOINTS}.execs:start"),
            Route("POST", "/v1/sessions/{id}/hold", f"{ENDPOINTS}.execs:hold"),
            _approvals("POST", "/v1/approvals/{id}/wait", "wait"),
        ),
        call="broker.client.executing:run_exec",
        render=f"{RENDER}:exec_ended",
        interspersed=False,
    ),
    _published(
        "jwks",
        "/.well-known/jwks.json",
        "Print the issuer's JSON Web Key Set: the key that signs now, and each retired one until its last token ends.",
        " > jwks.json   (to upload where a provider takes keys, not a URL)",
    ),
    _published(
        "discovery",
        "/.well-known/openid-configuration",
        "Print the issuer's OpenID Connect discovery document (host it at ISSUER/.well-known/openid-configuration).",
        "",
    ),
    _published(
        "revoked",
        "/.well-known/revoked",
        "Print the jti of each token still alive whose session was revoked (verifiers read /.well-known/revoked).",
        "",
    ),
    Command(
        ("identity", "rotate-key"),
        f"{IDENTITY}:rotate_key",
        "Make a new issuer signing key; the old one stays in the JWKS until the last token it signed ends (1 h).\n\n"
        "With [identity] transit_key, a new version of the Vault transit key. Verifiers that fetch the JWKS need\n"
        "nothing; where keys were uploaded, upload broker identity jwks again now.\n"
        "Example: broker identity rotate-key",
        (_json("Print the old and new key ids as JSON."),),
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
        routes=(_approvals("GET", "/v1/approvals", "listed"),),
        call="broker.client.approving:approvals",
        render=f"{RENDER}:approvals",
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
        routes=(_approvals("POST", "/v1/approvals/{id}/approve", "approve"),),
        call="broker.client.approving:approve",
        render=f"{RENDER}:approved",
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
        routes=(_approvals("POST", "/v1/approvals/{id}/deny", "deny"),),
        call="broker.client.approving:deny",
        render=f"{RENDER}:denied",
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
        routes=(Route("POST", "/v1/policy/check", f"{ENDPOINTS}.service:check"),),
        call=f"{CALLS}:check",
        render=f"{RENDER}:decision",
    ),
    Command(
        ("policy", "lint"),
        "broker.cli.checking:lint",
        "Validate policy files (syntax, fields, provider instances the config defines).\n\n"
        "Example: broker policy lint /etc/broker/policies",
        (Option("directory", kind=ARGUMENT, help="Policy directory [default: the config's policy_dir]."),),
    ),
    *AUDIT_COMMANDS,
)

GROUPS = (
    Group("session", "Change a running session's egress allow-list."),
    Group("policy", "Check manifests against the policy; lint policy files."),
    Group("audit", "Verify and read the issuance log."),
    Group("identity", "The broker as an OpenID Connect issuer: its keys, discovery document and revoked tokens."),
)
