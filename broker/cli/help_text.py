"""The top-level ``broker --help``, pre-rendered by scripts/gen-reference (a test keeps it current)."""

TOP_LEVEL_HELP = """\
Usage: broker [OPTIONS] COMMAND [ARGS]...

  Scoped-credential broker: short-lived, narrow credentials for sandboxed
  agents.

Options:
  --config <str>            Config file [default: /etc/broker/broker.toml].
                            [env var: BROKER_CONFIG]
  --debug                   Show tracebacks for internal errors.
  -v, --verbose             Log the policy decision and every provider call to
                            stderr.
  --log-format <text|json>  Format of stderr logs.  [default: text]
  --version                 Print the version and exit.
  --install-completion      Install completion for the current shell.
  --show-completion         Show completion for the current shell, to copy it
                            or customize the installation.
  -h, --help                Show this message and exit.

Commands:
  init     Write a commented config, an example policy, the audit keys...
  doctor   Check the installation: config, policy, runtime and state...
  serve    Run the broker as a daemon: HTTP/1.1 + JSON on a Unix socket,...
  issue    Decide, mint, inject and log the credentials a task manifest...
  revoke   Revoke every credential of a session at its provider and wipe...
  status   List live sessions (with --all, ended ones too).
  renew    Re-mint credentials that expire before their session (GitHub's...
  exec     Issue, run CMD with only its scoped credentials, revoke when...
  sweep    Revoke expired sessions, retry pending revocations, finish...
  session  Change a running session's egress allow-list.
  policy   Check manifests against the policy; lint policy files.
  audit    Verify and read the issuance log.
"""
