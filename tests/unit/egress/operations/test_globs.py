"""The glob language of ``operations`` (segments, refs, routes), canonical request paths, and glob containment."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from broker.egress.operations.refs import RefError, _check_segments, check_ref_name, parse_ref_glob
from broker.egress.operations.routes import RouteError, parse_path_glob, parse_route, request_paths
from broker.egress.operations.segments import SegmentGlob
from broker.vocab.globs import glob_match

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize(
    ("pattern", "ref", "matched"),
    [
        ("refs/heads/agent/*", "refs/heads/agent/x", True),
        ("refs/heads/agent/*", "refs/heads/agent/x/y/z", True),
        ("refs/heads/agent/*", "refs/heads/agent", False),
        ("refs/heads/agent/*", "refs/heads/agentx", False),
        ("refs/heads/agent/*", "refs/heads/Agent/x", False),
        ("refs/heads/agent/*", "refs/tags/agent/x", False),
        ("refs/heads/agent/x*", "refs/heads/agent/xyz", True),
        ("refs/heads/agent/x*", "refs/heads/agent/x", True),
        ("refs/heads/agent/x*", "refs/heads/agent/xy/z", False),
        ("refs/heads/*-bot", "refs/heads/a-bot", True),
        ("refs/heads/*-bot", "refs/heads/a/b-bot", False),
        ("refs/heads/main", "refs/heads/main", True),
        ("refs/heads/main", "refs/heads/main2", False),
        ("refs/*", "refs/notes/commits", True),
    ],
)
def test_push_globs(pattern: str, ref: str, matched: bool) -> None:
    assert parse_ref_glob(pattern).matches(ref) is matched


@pytest.mark.parametrize(
    "pattern",
    [
        "heads/agent/*",
        "refs/heads/agent/**",
        "refs/heads/agent/",
        "refs/heads//x",
        "refs/heads/../main",
        "refs/heads/.x/*",
        "refs/heads/x.lock",
        "refs/heads/x?",
        "refs/heads/[ab]",
        "refs/heads/x y",
        "refs/heads/a@{1}",
        "refs/heads/x.",
        "refs/heads/a\\b",
        "refs/heads/" + "x" * 250,
    ],
)
def test_malformed_push_globs_are_refused(pattern: str) -> None:
    with pytest.raises(RefError):
        parse_ref_glob(pattern)


def test_ref_names_follow_git() -> None:
    check_ref_name("refs/heads/agent/feature-1.2_x")
    check_ref_name("refs/heads/agent/ünïcode")
    for bad in ("HEAD", "refs/heads/a..b", "refs/heads/a~1", "refs/heads/a^", "refs/heads/a:b", "refs/heads/\x7f"):
        with pytest.raises(RefError):
            check_ref_name(bad)


@pytest.mark.parametrize(
    ("route", "method", "path", "matched"),
    [
        ("GET *", "GET", "/", True),
        ("GET *", "GET", "/repos/o/r/pulls/1", True),
        ("GET *", "POST", "/repos/o/r", False),
        ("* /repos/*/*", "DELETE", "/repos/o/r", True),
        ("POST /repos/*/*/pulls", "POST", "/repos/o/r/pulls", True),
        ("POST /repos/*/*/pulls", "POST", "/repos/o/r/pulls/1", False),
        ("PATCH /repos/*/*/pulls/*", "PATCH", "/repos/o/r/pulls/1", True),
        ("PATCH /repos/*/*/pulls/*", "PATCH", "/repos/o/r/pulls/comments/9", True),  # a last * is the rest
        ("PATCH /repos/*/*/pulls/*", "PATCH", "/repos/o/r/pulls", False),
        ("PUT /repos/*/*/pulls/*/merge", "PUT", "/repos/o/r/pulls/1/merge", True),
        ("PUT /repos/*/*/pulls/*/merge", "PUT", "/repos/o/r/pulls/1/2/merge", False),
        ("GET /Repos/*", "GET", "/repos/x", True),  # kept in lower case, like request paths
        ("GET /", "GET", "/", True),
        ("GET /", "GET", "/x", False),
    ],
)
def test_routes(route: str, method: str, path: str, matched: bool) -> None:
    assert parse_route(route).matches(method, path) is matched


@pytest.mark.parametrize(
    "route",
    [
        "GET",
        "GET  /x",
        "get /x",
        "GET /x extra",
        "GET repos",
        "GET /x/",
        "GET //x",
        "GET /a/../b",
        "GET /a/./b",
        "GET /a/**",
        "GET /a?b=1",
        "GET /a%2fb",
        "GET /a;b",
        "GET /a b",
        "GET /ä",
        "G3T /x",
        "GET /" + "x" * 300,
    ],
)
def test_malformed_routes_are_refused(route: str) -> None:
    with pytest.raises(RouteError):
        parse_route(route)


@pytest.mark.parametrize(
    ("target", "readings"),
    [
        ("/", ("/",)),
        ("/?q=1", ("/",)),
        ("/repos/o/r/pulls/1/merge", ("/repos/o/r/pulls/1/merge",)),
        ("/repos/o/r/pulls/1/merge/", ("/repos/o/r/pulls/1/merge",)),
        ("/repos/o/r/pulls/1/%6Derge", ("/repos/o/r/pulls/1/merge",)),
        ("/repos/o/r/pulls/1/%6d%65rge", ("/repos/o/r/pulls/1/merge",)),
        ("/REPOS/O/R/PULLS/1/MERGE", ("/repos/o/r/pulls/1/merge",)),
        ("/repos/o/r/pulls/1%2Fmerge", ("/repos/o/r/pulls/1%2fmerge", "/repos/o/r/pulls/1/merge")),
        ("/repos/o/r/pulls/1%5cmerge", ("/repos/o/r/pulls/1%5cmerge", "/repos/o/r/pulls/1/merge")),
        ("/a/b%20c", ("/a/b%20c",)),
        ("/a/%25", ("/a/%25",)),
    ],
)
def test_request_paths_are_made_canonical(target: str, readings: tuple[str, ...]) -> None:
    assert request_paths(target) == readings


@pytest.mark.parametrize(
    "target",
    [
        "https://api.github.com/repos",
        "*",
        "repos/o/r",
        "/a//b",
        "/a/./b",
        "/a/../b",
        "/a/%2e%2e/b",
        "/a/%2E/b",
        "/a/.%2e/b",
        "/a/b;x=1",
        "/a/%00",
        "/a/%zz",
        "/a/%4",
        "/a/b#frag",
        "/a\\b",
        "/a b",
        "/ä",
        "/a/\x00",
        "/a%2f%2fb",
    ],
)
def test_request_paths_the_broker_will_not_read_are_refused(target: str) -> None:
    with pytest.raises(RouteError):
        request_paths(target)


# -- containment -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("narrow", "wide", "within"),
    [
        ("refs/heads/agent/x*", "refs/heads/agent/*", True),
        ("refs/heads/agent/x/*", "refs/heads/agent/*", True),
        ("refs/heads/agent/x", "refs/heads/agent/*", True),
        ("refs/heads/agent/*", "refs/heads/agent/*", True),
        ("refs/heads/agent/*", "refs/heads/agent/x*", False),
        ("refs/heads/*", "refs/heads/agent/*", False),
        ("refs/heads/agent/*", "refs/heads/*", True),
        ("refs/heads/agent-*", "refs/heads/agent/*", False),
        ("refs/heads/a*b", "refs/heads/a*", True),
        ("refs/heads/a*", "refs/heads/a*b", False),
        ("refs/heads/agent/*", "refs/*", True),
        ("refs/heads/agent", "refs/heads/agent/*", False),
    ],
)
def test_push_glob_containment(narrow: str, wide: str, within: bool) -> None:
    assert parse_ref_glob(narrow).within(parse_ref_glob(wide)) is within


@pytest.mark.parametrize(
    ("narrow", "wide", "within"),
    [
        ("GET /repos/*/*/pulls", "GET *", True),
        ("GET *", "GET /repos/*", False),
        ("GET *", "* *", True),
        ("* /x", "GET /x", False),
        ("PATCH /repos/*/*/pulls/*", "PATCH /repos/*/*/pulls/*", True),
        ("PATCH /repos/*/*/pulls/1", "PATCH /repos/*/*/pulls/*", True),
        ("PATCH /repos/o/*/pulls/*", "PATCH /repos/*/*/pulls/*", True),
        ("PATCH /repos/*/*/pulls/*", "PATCH /repos/o/*/pulls/*", False),
        ("POST /repos/*/*/pulls", "POST /repos/*/*/pulls/*", False),
        ("GET /", "GET *", True),
        ("GET /", "GET /*", False),
    ],
)
def test_route_containment(narrow: str, wide: str, within: bool) -> None:
    assert parse_route(narrow).within(parse_route(wide)) is within


def reference_match(pattern: str, value: str) -> bool:
    """Segment by segment with broker.vocab.globs (path-like: * never crosses /), the rest form by counting."""
    if pattern == "*":
        return True
    wanted, got = pattern.split("/"), value.split("/")
    if len(wanted) > 1 and wanted[-1] == "*":
        wanted = wanted[:-1]
        if len(got) <= len(wanted) or not all(got[len(wanted) :]):
            return False
        got = got[: len(wanted)]
    return len(got) == len(wanted) and all(glob_match(w, g) for w, g in zip(wanted, got, strict=True))


def test_containment_agrees_with_brute_force() -> None:
    """Path globs of up to two fixed segments (and the rest form) against every path of up to four segments."""
    words = ("a", "b", "ab", "ba", "c", "aab", "bab", "abc", "bca")
    values = ["/"] + ["/" + "/".join(p) for n in range(1, 5) for p in itertools.product(words, repeat=n)]
    parts = ("a", "b", "*", "a*", "*b", "*a*", "a*b*", "*a*b")
    texts = ["*", "/"]
    for n in range(0, 3):
        for fixed in itertools.product(parts, repeat=n):
            if fixed:
                texts.append("/" + "/".join(fixed))
            texts.append("/" + "/".join((*fixed, "*")))
    globs = {text: parse_path_glob(text) for text in texts}
    matched = {text: frozenset(v for v in values if glob.matches(v)) for text, glob in globs.items()}
    for text in texts:
        if text != "/":
            assert matched[text] == {v for v in values if reference_match(text, v)}, text
    for one, other in itertools.product(texts, repeat=2):
        expected = matched[one] <= matched[other]
        assert globs[one].within(globs[other]) is expected, (one, other)


def test_a_hostile_path_against_many_stars_is_matched_in_linear_time() -> None:
    """A backtracking matcher takes hours here (every split of the a's is tried); run apart, bounded generously."""
    code = (
        "from broker.egress.operations.routes import parse_path_glob\n"
        "glob = parse_path_glob('/x/*a*a*a*a*a*a*a*a*b/*')\n"
        "assert not glob.matches('/x/' + 'a' * 200_000 + '/y')\n"
        "assert glob.matches('/x/' + 'a' * 200_000 + 'b/y')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, timeout=60, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_segment_glob_knows_its_form() -> None:
    assert SegmentGlob.of("*", leading_slash=True).anything
    rest = SegmentGlob.of("/repos/*", leading_slash=True)
    assert rest.rest and rest.segments == ("repos",)
    assert str(rest) == "/repos/*"


def test_push_glob_containment_agrees_with_brute_force() -> None:
    """The ref form (no leading /) of the same check: up to two fixed segments after refs/, refs up to five deep."""
    words = ("a", "b", "ab", "c")
    values = ["refs/" + "/".join(p) for n in range(1, 5) for p in itertools.product(words, repeat=n)]
    parts = ("a", "*", "a*", "*b")
    texts = []
    for n in range(0, 3):
        for fixed in itertools.product(parts, repeat=n):
            if fixed:
                texts.append("refs/" + "/".join(fixed))
            texts.append("refs/" + "/".join((*fixed, "*")))
    globs = {text: parse_ref_glob(text) for text in texts}
    matched = {text: frozenset(v for v in values if glob.matches(v)) for text, glob in globs.items()}
    for one, other in itertools.product(texts, repeat=2):
        assert globs[one].within(globs[other]) is (matched[one] <= matched[other]), (one, other)


def test_the_one_expression_for_ref_names_agrees_with_the_rules_one_by_one() -> None:
    pieces = ("a", ".", "/", "lock", "@", "{", " ", "~", "\\", "\x01", "-", "é")
    for n in range(1, 5):
        for combination in itertools.product(pieces, repeat=n):
            name = "refs/heads/" + "".join(combination)
            try:
                _check_segments(name, glob=False)
                expected = True
            except RefError:
                expected = False
            try:
                check_ref_name(name)
                fast = True
            except RefError:
                fast = False
            assert fast is expected, repr(name)
