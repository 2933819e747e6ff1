"""Hypothesis strategies of hostile input for the property-based tests: random bytes, YAML-ish text built from a
grammar of plausible manifest fragments, structural mutations of a valid document (keys deleted or renamed,
values of another type, unicode and control characters injected) and byte mutations; the settings the tests run
them with, and the providers the input is read against.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.fixtures.stack import STACK_TASK

LOADER = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CLI = settings(LOADER, max_examples=40)


def providers_table(addr: str) -> dict[str, dict[str, object]]:
    return {
        "vault": {"type": "vault", "addr": addr, "token_file": "vault-token"},
        "aws": {"type": "aws_sts", "region": "us-east-1", "endpoint_url": addr},
        "github": {"type": "github_app", "app_id": "424242", "private_key_file": "app.pem", "api_url": addr},
    }


# -- strategies: a grammar of plausible manifest fragments --------------------------------

KEYS = [
    "version", "task", "ttl", "sandbox", "uid", "gid", "mount_path", "env", "credentials", "name",
    "provider", "policies", "num_uses", "role_arn", "session_policy", "policy_arns", "Version",
    "Statement", "Effect", "Action", "Resource", "NotAction", "NotResource", "Principal", "Condition",
    "Sid", "repositories", "permissions", "contents", "metadata", "administration", "LD_PRELOAD",
    "GITHUB_TOKEN", "<<", "? complex", "1", "yes", "~", "task ", "Task", '"\\e[31mkey"', '"k\\u202e"',
    '"' + "k" * 600 + '"', '"x\\x00"',
]  # fmt: skip
SCALARS = [
    "1", "0", "-1", "2", str(2**64), "9" * 60, "1.0e+309", "-.inf", ".nan", "~", "null", "true", "yes",
    "no", "30m", "15m", "1h", "90s", "5d", "1w", "1.5h", "15 m", "15M", "1:30", "0x1F", "0o17", "1_000",
    "2012-10-17", '"2012-10-17"', "2001-12-14t21:59:43.10-05:00", "fix-build-123", "FIX-1", "fix/../x",
    "kv", "../../etc", "/etc/passwd", "vault", "aws", "github", "Vault", "ci-read", "root", "ROOT",
    "' ci-read'", '"ci-read\\n"', "default", "octo-org/widgets", "Octo-Org/Widgets", "\u043ecto-org/widgets",
    "octo-org/..", "octo-org/a/b", "arn:aws:iam::123456789012:role/agent-ci", "arn:aws:iam::*:role/x",
    "arn:aws-cn:iam::123456789012:role/agent-ci", "arn:aws:s3:::ci-artifacts/*", "s3:GetObject", "s3:*",
    "'*'", "Allow", "allow", "Deny", "/run/secrets", "/", "/run/../etc", "write", "read", "admin",
    "superuser", "&a x", "*a", "!!str x", "!!python/name:os.system", "'quoted'", '"\\e[31m"', '"\\0"',
    '"\\u202e"', '"\\x07"', "|\n  block", ">-\n  folded", "[]", "{}", "[a, b", "{a: 1", "- x", ": x", "#",
    "\t", "%", "@x", "`x", "'unterminated", '"a\\', "\u0430", "\u200b", "\ufeff", "\U0001f600",
    str(10**600), '"\\e]0;x\\a"', '"k\\u202e"', "a\u202e: [", "\u202e{",
]  # fmt: skip
GLITCHES = [
    "\t",
    "---\n",
    "...\n",
    "? ",
    "&a ",
    "*a",
    "!!map ",
    "%YAML 1.1\n",
    "- ",
    "<<: ",
    "#",
    "\r",
    "\x85",
    "{",
    "[",
]

raw_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
leaf = st.one_of(st.sampled_from(SCALARS), raw_text)
key = st.one_of(st.sampled_from(KEYS), raw_text)
tree = st.recursive(
    leaf,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(key, children, max_size=5),
    max_leaves=20,
)
credential = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["kv", "repo", "artifacts", "KV", "../x"]) | leaf,
        "provider": st.sampled_from(["vault", "aws", "github"]) | leaf,
        "policies": st.just(["ci-read"]) | tree,
        "repositories": st.just(["octo-org/widgets"]) | tree,
        "permissions": st.just({"contents": "write"}) | tree,
        "role_arn": st.just("arn:aws:iam::123456789012:role/agent-ci") | leaf,
        "session_policy": tree,
        "ttl": st.sampled_from(["15m", "10m", "0", "1h"]) | leaf,
        "num_uses": st.sampled_from(["0", "5", "-1"]) | leaf,
        "extra": tree,
    },
)
manifest_tree = st.fixed_dictionaries(
    {},
    optional={
        "version": st.sampled_from(["1", "2", "'1'"]) | leaf,
        "task": st.sampled_from(["fix-build-123", "fix-1"]) | leaf,
        "ttl": leaf,
        "sandbox": st.fixed_dictionaries(
            {}, optional={"uid": leaf, "gid": leaf, "mount_path": leaf, "env": tree, "x": tree}
        ),
        "credentials": st.lists(credential, max_size=3) | tree,
        "extra": tree,
    },
)


def render(node: Any, rnd: random.Random, indent: int = 0) -> list[str]:
    """YAML-ish lines, block or flow style at random, scalars written raw (so YAML reads them its own way)."""
    pad = " " * indent
    if isinstance(node, dict | list) and node and rnd.random() < 0.25:
        return [pad + flow(node)]
    if isinstance(node, dict):
        if not node:
            return [pad + "{}"]
        lines = []
        for k, v in node.items():
            if isinstance(v, dict | list) and v:
                lines.append(f"{pad}{k}:")
                lines += render(v, rnd, indent + 2)
            else:
                lines.append(f"{pad}{k}: {flow(v)}")
        return lines
    if isinstance(node, list):
        if not node:
            return [pad + "[]"]
        lines = []
        for item in node:
            inner = render(item, rnd, indent + 2)
            lines.append(f"{pad}- {inner[0].lstrip()}")
            lines += inner[1:]
        return lines
    return [pad + str(node)]


def flow(node: Any) -> str:
    if isinstance(node, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in node.items()) + "}"
    if isinstance(node, list):
        return "[" + ", ".join(flow(v) for v in node) + "]"
    return str(node)


@st.composite
def yamlish(draw: st.DrawFn) -> bytes:
    rnd = draw(st.randoms(use_true_random=False))
    lines = render(draw(manifest_tree), rnd)
    for _ in range(draw(st.integers(0, 3))):
        where = rnd.randrange(len(lines) + 1)
        lines.insert(where, rnd.choice(GLITCHES) + (lines[where] if where < len(lines) else ""))
    return "\n".join(lines).encode("utf-8", "surrogatepass")


# -- strategies: mutations of valid documents ----------------------------------------------

INJECT = ["\x00", "\n", "\r", "\t", "\x1b[2J", "\x7f", "\u202e", "\u200b", "\u0430", "\u043e", "\ufeff", "/", "..", "%2F", " ", "*", "\U0001f600", "K"]  # fmt: skip
ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, 2**64, -(2**63), 10**30, 1.5, float("inf"), float("nan"), "", " ",
    "x" * 300, "\x00", [], {}, [1, 2], {"a": 1}, [[[[]]]], "root", "*", "-5m", "5d", "1e309", 10**600,
    {"\x1b[2J": 1}, {"k" * 600: 1}, {"a\u202eb": [1]},
]  # fmt: skip


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, (*prefix, i))


def parent_of(doc: Any, path: tuple[Any, ...]) -> Any:
    node = doc
    for step in path[:-1]:
        node = node[step]
    return node


@st.composite
def mutated(draw: st.DrawFn, base: str) -> tuple[bytes, bool]:
    """A valid document with one to four structural mutations, dumped as YAML or JSON."""
    doc = copy.deepcopy(yaml.safe_load(base))
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.sampled_from([p for p in paths(doc) if p]))
        parent, last = parent_of(doc, where), where[-1]
        op = draw(st.sampled_from(["delete", "replace", "inject", "rekey", "duplicate", "add"]))
        if op == "delete":
            del parent[last]
        elif op == "replace":
            parent[last] = copy.deepcopy(draw(st.sampled_from(ODD_VALUES) | st.text(max_size=20)))
        elif op == "inject" and isinstance(parent[last], str):
            text = parent[last]
            at = draw(st.integers(0, len(text)))
            parent[last] = text[:at] + draw(st.sampled_from(INJECT)) + text[at:]
        elif op == "rekey" and isinstance(parent, dict):
            new = draw(st.sampled_from([str(last).upper(), f"{last} ", "Not" + str(last), str(last) * 100]))
            new += draw(st.sampled_from(["", *INJECT]))
            parent[new] = parent.pop(last)
        elif op == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[last]))
        elif op == "add" and isinstance(parent[last], dict):
            parent[last][draw(st.sampled_from(KEYS))] = copy.deepcopy(draw(st.sampled_from(ODD_VALUES)))
        if not isinstance(doc, dict) or not doc:
            break
    as_json = draw(st.booleans())
    if as_json:
        return json.dumps(doc, ensure_ascii=draw(st.booleans())).encode(), True
    text = yaml.safe_dump(doc, default_flow_style=draw(st.sampled_from([False, True, None])), allow_unicode=True)
    return text.encode("utf-8", "surrogatepass"), False


@st.composite
def byte_mutated(draw: st.DrawFn, base: str) -> bytes:
    """A valid document with a few bytes inserted, deleted or overwritten."""
    data = bytearray(base.encode())
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["insert", "delete", "overwrite"]))
        tokens = [b":", b"-", b"\n", b"  ", b"&a", b"*a", b"!!", b'"', b"'", b"[", b"{", *(c.encode() for c in INJECT)]
        chunk = draw(st.binary(min_size=1, max_size=4) | st.sampled_from(tokens))
        if op == "insert":
            data[at:at] = chunk
        elif op == "delete":
            del data[at : at + len(chunk)]
        else:
            data[at : at + len(chunk)] = chunk
    return bytes(data)


def manifest_inputs() -> st.SearchStrategy[tuple[bytes, bool]]:
    return st.one_of(
        st.tuples(st.binary(max_size=512), st.booleans()),
        st.tuples(yamlish(), st.just(False)),
        mutated(STACK_TASK),
        st.tuples(byte_mutated(STACK_TASK), st.booleans()),
    )
