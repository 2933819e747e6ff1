"""AWS session policies: strict parsing of a manifest's ``session_policy``, and glob containment.

``parse_session_policy`` turns the untrusted mapping into a normalised
``SessionPolicy``: every ``Action`` and ``Resource`` a tuple, the statements a
tuple, and ``Principal``, ``NotPrincipal`` and unknown keys refused with an
error naming the field. ``NotAction`` and ``NotResource`` are well-formed IAM,
so they parse and are kept: the grant check denies them (``aws_request``), so
the attempt reaches the issuance log. Its compact JSON is exactly what
``AssumeRole`` receives and what the policy digest covers.

``sent_policy`` is the inline policy AssumeRole receives: the manifest's, and
for an ``inject: proxy`` credential an explicit ``Deny`` of minting
credentials (``DENY``: ``sts:AssumeRole*``, ``sts:AssumeRoot``,
``sts:GetFederationToken``, ``sts:GetSessionToken``, every ``sts:Get*Token``
and ``sts:Get*Credentials``, S3 Express's ``CreateSession``). The proxy
already refuses to re-sign those; the Deny has AWS refuse them too, with the
proxy out of the way (an explicit Deny in a session policy wins over any
Allow). Without a session policy it goes beside an Allow of everything (the
role's own permissions stay the ceiling); beside managed ``policy_arns``
alone it goes alone (session policies allow together: an Allow of everything
would undo their narrowing, where a lone Deny narrows only).

Whether a requested glob lies within a granted one is ``broker.vocab.globs.glob_within``
(the same containment the egress operations use). ``widening`` says why a
child's session policy is wider than its parent's (delegation's Narrowing):
each action and resource of each child Allow within one parent Allow, under
at least that statement's conditions; every Deny of the parent kept; no
``NotAction`` or ``NotResource``. A resource with a policy variable is taken
as a wildcard in a child and covers nothing in a parent (its value differs
from session to session).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.vocab.fields import Fields, describe, shown
from broker.vocab.globs import glob_within

VERSIONS = ("2012-10-17", "2008-10-17")
MAX_STATEMENTS = 100
MAX_ITEMS = 100
#: ``*``, or ``service:Action`` where the action part may hold ``*`` and ``?``.
ACTION = re.compile(r"\*|[A-Za-z0-9-]{1,64}:[A-Za-z0-9*?]{1,128}", re.ASCII)
#: ``*``, or an ARN of printable ASCII without spaces.
RESOURCE = re.compile(r"\*|arn:[\x21-\x7e]{1,2044}", re.ASCII)
SID = re.compile(r"[A-Za-z0-9]{1,128}", re.ASCII)
CONDITION_OPERATOR = re.compile(r"(ForAllValues:|ForAnyValue:)?[A-Za-z]{2,64}", re.ASCII)
CONDITION_KEY = re.compile(r"[A-Za-z0-9-]{1,64}:[\x21-\x7e]{1,256}", re.ASCII)
CONDITION_VALUE = re.compile(r"[^\x00-\x1f\x7f]{0,1024}")
REFUSED_KEYS = {
    "Principal": "a session policy takes no Principal",
    "NotPrincipal": "a session policy takes no NotPrincipal",
}
POLICY_VARIABLE = re.compile(r"\$\{[^}]*\}")
#: An S3 bucket or object ARN (any partition): the bucket, then the key after ``/`` if any.
S3_ARN = re.compile(r"arn:aws[a-z-]*:s3:::([^/]*)(?:/.*)?", re.ASCII | re.DOTALL)
#: What a proxied credential's session may never do, whatever its role allows: mint credentials of its own.
DENIED = (
    "sts:AssumeRole*",
    "sts:AssumeRoot",
    "sts:GetFederationToken",
    "sts:GetSessionToken",
    "sts:Get*Token",
    "sts:Get*Credentials",
    "s3express:CreateSession",
)
DENY: dict[str, Any] = {"Effect": "Deny", "Action": list(DENIED), "Resource": "*"}
ALLOW_ALL: dict[str, Any] = {"Effect": "Allow", "Action": "*", "Resource": "*"}
#: A bucket name that is one host label: what clients address virtual-hosted over TLS (a name with a dot is not
#: under AWS's wildcard certificate, so the SDKs send it path-style; a wildcard or a variable names no one host).
VIRTUAL_BUCKET = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", re.ASCII)


@dataclass(frozen=True)
class Statement:
    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    sid: str | None = None
    condition_json: str | None = None  # compact JSON of the Condition block, if any
    not_actions: tuple[str, ...] = ()  # denied by every grant; kept so the denial can name them
    not_resources: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.sid is not None:
            doc["Sid"] = self.sid
        doc["Effect"] = self.effect
        if self.actions or not self.not_actions:
            doc["Action"] = list(self.actions)
        if self.not_actions:
            doc["NotAction"] = list(self.not_actions)
        if self.resources or not self.not_resources:
            doc["Resource"] = list(self.resources)
        if self.not_resources:
            doc["NotResource"] = list(self.not_resources)
        if self.condition_json is not None:
            doc["Condition"] = json.loads(self.condition_json)
        return doc


@dataclass(frozen=True)
class SessionPolicy:
    version: str
    statements: tuple[Statement, ...]

    def document(self) -> dict[str, Any]:
        return {"Version": self.version, "Statement": [s.document() for s in self.statements]}

    def to_json(self) -> str:
        """The compact JSON sent to AWS (ASCII only, so within the API's character set)."""
        return compact_json(self.document())


def compact_json(document: object) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=True)


def sent_policy(policy: SessionPolicy | None, policy_arns: tuple[str, ...], proxied: bool) -> str:
    """The inline session policy AssumeRole receives ("" for none): ``policy``, and for ``proxied`` keys the
    Deny of new credentials (see the module docstring)."""
    if not proxied:
        return policy.to_json() if policy is not None else ""
    if policy is not None:
        document = policy.document()
        document["Statement"] = [*document["Statement"], DENY]
        return compact_json(document)
    statements = [DENY] if policy_arns else [ALLOW_ALL, DENY]
    return compact_json({"Version": VERSIONS[0], "Statement": statements})


# -- parsing -----------------------------------------------------------------------------


def parse_session_policy(fields: Fields) -> SessionPolicy:
    """Read one session policy document; errors name the offending field."""
    version = fields.raw("Version")
    if not isinstance(version, str):
        raise fields.fail("Version", f'expected the string "2012-10-17" (quote it), got {describe(version)}')
    if version not in VERSIONS:
        raise fields.fail("Version", f"must be one of {', '.join(VERSIONS)}")
    raw = fields.raw("Statement")
    if isinstance(raw, Mapping):
        single = fields.mapping("Statement")
        assert single is not None
        items = [single]
    elif isinstance(raw, list):
        items = fields.list_of_mappings("Statement", max_items=MAX_STATEMENTS)
    else:
        raise fields.fail("Statement", f"expected a list of statements or one statement, got {describe(raw)}")
    statements = tuple(_parse_statement(item) for item in items)
    sids = [s.sid for s in statements if s.sid is not None]
    for index, sid in enumerate(sids):
        if sid in sids[:index]:
            raise fields.fail("Statement", f"Sid {sid!r} is used twice")
    fields.done()
    return SessionPolicy(version=version, statements=statements)


def _parse_statement(st: Fields) -> Statement:
    for key, message in REFUSED_KEYS.items():
        if st.has(key):
            raise st.fail(key, message)
    effect = st.req_string("Effect", max_len=16)
    if effect not in ("Allow", "Deny"):
        raise st.fail("Effect", f"must be Allow or Deny, not {effect[:16]!r}")
    action_hint = "'*' or service:Action, with * and ? as wildcards"
    not_actions = _one_or_more(st, "NotAction", ACTION, action_hint) if st.has("NotAction") else ()
    not_resources = _one_or_more(st, "NotResource", RESOURCE, "'*' or an ARN") if st.has("NotResource") else ()
    actions = _one_or_more(st, "Action", ACTION, action_hint) if st.has("Action") or not not_actions else ()
    resources = (
        _one_or_more(st, "Resource", RESOURCE, "'*' or an ARN") if st.has("Resource") or not not_resources else ()
    )
    sid = st.string("Sid", required=False, pattern=SID, max_len=128, hint="letters and digits")
    condition = st.mapping("Condition", required=False)
    condition_json = compact_json(_parse_condition(condition)) if condition is not None else None
    st.done()
    return Statement(effect, actions, resources, sid, condition_json, not_actions, not_resources)


def _one_or_more(st: Fields, key: str, pattern: re.Pattern[str], hint: str) -> tuple[str, ...]:
    value = st.raw(key)
    if isinstance(value, str):
        single = st.req_string(key, pattern=pattern, max_len=2048, hint=hint)
        return (single,)
    if isinstance(value, list):
        items = st.string_list(key, pattern=pattern, max_items=MAX_ITEMS, max_len=2048, hint=hint)
        assert items is not None
        return items
    if value is None:
        raise st.fail(key, "required")
    raise st.fail(key, f"expected a string or a list of strings, got {describe(value)}")


def _parse_condition(condition: Fields) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for operator, _ in condition.items():
        if not isinstance(operator, str) or not CONDITION_OPERATOR.fullmatch(operator):
            raise condition.fail(str(operator)[:40], "is not a condition operator")
        body = condition.mapping(operator)
        assert body is not None
        entries: dict[str, Any] = {}
        for key, value in body.items():
            if not isinstance(key, str) or not CONDITION_KEY.fullmatch(key):
                raise body.fail(str(key)[:40], "is not a condition key (service:name)")
            entries[key] = _condition_value(body, key, value)
        if not entries:
            raise condition.fail(operator, "needs at least one condition key")
        result[operator] = entries
    return result


def _condition_value(body: Fields, key: str, value: object) -> Any:
    if isinstance(value, list):
        if not value or len(value) > MAX_ITEMS:
            raise body.fail(key, f"needs 1 to {MAX_ITEMS} values")
        return [_condition_scalar(body, f"{key}[{i}]", item) for i, item in enumerate(value)]
    return _condition_scalar(body, key, value)


def _condition_scalar(body: Fields, where: str, value: object) -> str | int | bool:
    if isinstance(value, bool | int):
        return value
    if isinstance(value, str) and CONDITION_VALUE.fullmatch(value):
        return value
    raise body.fail(where, f"expected a string, number or boolean of at most 1024 characters, got {describe(value)}")


def bucket_names(policy: SessionPolicy) -> tuple[str, ...]:
    """The buckets the Allow statements name by exact name (``arn:aws:s3:::BUCKET``, ``arn:aws:s3:::BUCKET/*``),
    in order, once each. A bucket part with a wildcard (``*``, ``?``) or a policy variable names no one host, and
    one that is not a single host label (a dot in it) is not addressed virtual-hosted: both are left out."""
    names: list[str] = []
    for statement in policy.statements:
        if statement.effect != "Allow":
            continue
        for resource in statement.resources:
            arn = S3_ARN.fullmatch(resource)
            if arn is not None and VIRTUAL_BUCKET.fullmatch(arn.group(1)) and arn.group(1) not in names:
                names.append(arn.group(1))
    return tuple(names)


# -- containment -------------------------------------------------------------------------


def variables_as_wildcards(pattern: str) -> str:
    """A resource with policy variables (``${aws:username}``) as a glob: a variable may expand to anything."""
    return POLICY_VARIABLE.sub("*", pattern)


def refused(policy: SessionPolicy) -> list[str]:
    """The parts of a child's session policy delegation refuses outright (NotAction, NotResource)."""
    reasons = []
    for index, statement in enumerate(policy.statements):
        if statement.not_actions:
            reasons.append(f"session_policy.Statement[{index}]: NotAction is refused")
        if statement.not_resources:
            reasons.append(f"session_policy.Statement[{index}]: NotResource is refused")
    return reasons


def widening(child: SessionPolicy, parent: SessionPolicy) -> list[str]:
    """Why ``child`` allows more than ``parent``, each reason naming the statement that widens."""
    reasons = []
    kept = [statement.document() for statement in child.statements]
    for index, statement in enumerate(parent.statements):
        if statement.effect == "Deny" and statement.document() not in kept:
            reasons.append(f"session_policy: the parent's Deny statement [{index}] is missing")
    allows = [s for s in parent.statements if s.effect == "Allow" and not s.not_actions and not s.not_resources]
    for index, statement in enumerate(child.statements):
        if statement.effect != "Allow" or statement.not_actions or statement.not_resources:
            continue  # a Deny only narrows; NotAction/NotResource are refused above
        for action in statement.actions:
            for resource in statement.resources:
                if not any(_covers(parent_statement, statement, action, resource) for parent_statement in allows):
                    reasons.append(
                        f"session_policy.Statement[{index}]: {action} on {shown(resource, 120)} is outside the"
                        " parent's session policy"
                    )
    return reasons


def _covers(parent: Statement, child: Statement, action: str, resource: str) -> bool:
    if not any(glob_within(action, granted, ignore_case=True) for granted in parent.actions):
        return False
    wanted = variables_as_wildcards(resource)
    if not any(not POLICY_VARIABLE.search(granted) and glob_within(wanted, granted) for granted in parent.resources):
        return False
    return _conditions_kept(parent.condition_json, child.condition_json)


def _conditions_kept(parent: str | None, child: str | None) -> bool:
    """Every condition of the parent's statement is in the child's, with the same values (more only narrows)."""
    if parent is None:
        return True
    if child is None:
        return False
    wanted, given = json.loads(parent), json.loads(child)
    return all(
        operator in given and all(given[operator].get(key) == value for key, value in keys.items())
        for operator, keys in wanted.items()
    )
