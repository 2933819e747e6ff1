"""The task documents in the reference: the manifest's and the policy file's core tables.

What a task may ask and what a rule may grant change together, and apart from the operator's config
(``broker.cli.manual.config``); each provider type adds its own keys (``Provider.manual()``).
"""

from __future__ import annotations

from broker.cli.manual.config import DURATION
from broker.egress.operations.parsing import SECTIONS as OPERATIONS_SECTIONS
from broker.vocab.manual import Key, Section


def operations_sections(title: str, path: str) -> tuple[Section, ...]:
    """The ``operations`` tables (``broker.egress.operations.parsing.SECTIONS``) as read at ``path``."""
    return tuple(
        Section(f"{title}: {suffix}", path + below, tuple(Key(*key) for key in keys), intro)
        for suffix, below, keys, intro in OPERATIONS_SECTIONS
    )


LIMIT_KEYS = (
    Key("memory", "size", False, "Memory, no swap beyond it: 256MiB, 4GiB (at least 4MiB).", "not limited"),
    Key("cpus", "number", False, "CPUs' worth of time: 2, 0.5 (thousandths at most; up to 1024).", "not limited"),
    Key("pids", "integer", False, "Processes and threads at once (8 to 4194304).", "not limited"),
)
DESTINATION = "HOST:PORT, *.SUFFIX:PORT (two labels or more), IP:PORT or [IPv6]:PORT"

CORE_MANIFEST = (
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
            Key("limits", "table", False, "What the sandbox may use (broker exec, every sandbox kind).", "the rule's"),
            Key(
                "read_only_root",
                "boolean",
                False,
                "A container's root file system is read-only (bubblewrap's always is); false: writable.",
                "true",
            ),
        ),
    ),
    Section(
        "Manifest: sandbox.limits",
        "sandbox.limits",
        LIMIT_KEYS,
        "At least one key. Each at most the smallest value any rule the session draws on gives it (its limits),"
        " else denied (exit 3 naming the key); a key left out takes that value. Never dropped: under a rule without"
        " limits they are the session's all the same, and an exec whose host cannot enforce them refuses (exit 2)"
        " before anything is minted. Past memory the OOM killer ends a process (exec reports it, exit 137), past"
        " pids a fork fails with EAGAIN.",
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
        ),
    ),
)

CORE_POLICY = (
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
            Key(
                "approval",
                "table",
                False,
                "A person approves each session first: nothing is minted until then (see rules[].approval).",
                "none",
            ),
            Key(
                "delegate",
                "boolean",
                False,
                "broker exec sessions get broker.sock, where their sandbox may ask for child sessions covered by"
                " theirs (exit 3 naming the key that widens).",
                "false",
            ),
            Key("delegate_depth", "integer", False, "Levels of children (1 to 8): 1 = children cannot delegate.", "1"),
            Key(
                "delegate_rate",
                "integer",
                False,
                "Children a session's sandbox may ask for a minute (1 to 600), its children's included: every POST"
                " /v1/sessions counts, and so do policy checks finding a wider manifest and requests refused for the"
                " rate. Past it: HTTP 429, exit 3.",
                "10",
            ),
            Key(
                "delegate_total",
                "integer",
                False,
                "Children a session's sandbox may ask for in its life (1 to 100000), its children's included,"
                " policy checks finding a wider manifest too. Past it: HTTP 429, exit 3.",
                "256",
            ),
            Key("limits", "table", False, "The ceiling of its sessions' sandbox.limits (see rules[].limits).", "none"),
            Key("grants", "list", True, "What the rule allows, per provider instance."),
        ),
        "Deny by default: every credential must be covered by a grant of a rule matching task and requester.",
    ),
    Section(
        "Policy file: rules[].approval",
        "rules[].approval",
        (
            Key(
                "approvers",
                "list",
                True,
                'uids (or "uid:N") and "group:NAME" (the caller\'s gid or supplementary groups, as the kernel'
                " has them); never the requester itself. A session drawing on several such rules needs an"
                " approver named by each.",
            ),
            Key("timeout", DURATION, False, "To decide, and then to collect the approved session (at most 7d).", "15m"),
        ),
    ),
    Section(
        "Policy file: rules[].limits",
        "rules[].limits",
        LIMIT_KEYS,
        "The same keys as a manifest's sandbox.limits: a manifest above them is denied (exit 3), a manifest without"
        " a key gets it. A session drawing on several rules gets the smallest of each.",
    ),
    Section(
        "Policy file: rules[].grants[]",
        "rules[].grants[]",
        (
            Key("provider", "string", True, "A provider instance of the config."),
            Key("max_ttl", DURATION, False, "Cap for credentials of this grant."),
        ),
    ),
)


#: What the core reads of a ``[providers.NAME]`` table whose type has proxy facts (``Provider.proxy``).
