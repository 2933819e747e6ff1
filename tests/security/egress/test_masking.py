"""An answer never carries a secret back into the sandbox, however the upstream spells it.

The masker once knew each secret as its raw bytes only. An upstream shows
what it received spelled otherwise too: S3's ``SignatureDoesNotMatch``
prints the canonical request it computed, with a presigned request's session
token URI-encoded (``<CanonicalRequest>``) and the whole of it as hex bytes
(``<CanonicalRequestBytes>``); APIs echo a key inside base64 (a JWT-like
blob, at any alignment), URL-encoded, or as hex. Each test decodes what the
client received the way the upstream encoded it and looks for the secret.

- on the functions: the AWS re-signer's masker on S3's XML (the case found),
  and any secret, spelled any of those ways, in an answer split anywhere;
- as a user would: an OpenBao ``kind: secret`` through ``broker exec``, curl
  in the sandbox asking a recording upstream that echoes the key it received
  in those spellings; and boto3 in the sandbox getting S3's
  ``SignatureDoesNotMatch`` from an upstream among the AWS credential's hosts
  (the proxy re-signs with the real keys, the upstream prints them back).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import string
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.egress.injectors.sigv4 import AwsKeys
from broker.egress.injectors.sigv4.resigner import Resigner
from broker.egress.terminate.masking import Masker
from broker.vocab.secret import Secret
from providers.aws.files import placeholder_keys
from tests.fixtures.aws_proxied import AwsProxied, lines_json, py
from tests.fixtures.openbao import OpenBao
from tests.fixtures.recording_api import RecordingAPI, encoded, signature_mismatch
from tests.fixtures.sandbox import sandbox_unavailable
from tests.integration.egress.test_any_service import Service, received, service  # noqa: F401  (the fixture)

WINDOW = 6  # no run of this many of a secret's bytes (past its public prefix) may reach the client


def decoded(spelling: str, text: str) -> bytes:
    """``text`` decoded the way ``tests.fixtures.recording_api.encoded`` spelled it."""
    if spelling.startswith("url"):
        return unquote(text).encode()
    if spelling == "hex_bytes_of_url":
        return unquote(bytes.fromhex(text).decode()).encode()
    if spelling.startswith("hex") or spelling.startswith("HEX"):
        return bytes.fromhex(text)
    padded = text + "=" * (-len(text) % 4)
    return base64.urlsafe_b64decode(padded.replace("+", "-").replace("/", "_"))


def leaked(secret: bytes, seen: bytes, kept: int = 0) -> bytes | None:
    """A run of ``WINDOW`` bytes of ``secret`` (past its first ``kept``) that ``seen`` holds, or None."""
    return next(
        (secret[i : i + WINDOW] for i in range(kept, len(secret) - WINDOW + 1) if secret[i : i + WINDOW] in seen),
        None,
    )


def masked(masker: Masker, body: bytes, sizes: list[int]) -> bytes:
    """``body`` through ``masker`` in pieces of ``sizes`` (cycled)."""
    out, start, turn = [], 0, 0
    while start < len(body):
        size = sizes[turn % len(sizes)]
        out.append(masker.feed(body[start : start + size]))
        start, turn = start + size, turn + 1
    return b"".join(out) + masker.flush()


def resigner_of(token: str) -> tuple[Resigner, AwsKeys]:
    real = AwsKeys("ASIAREALKEYID0000001", Secret("r" * 40), Secret(token))
    return Resigner("store", frozenset({("s3.us-east-1.amazonaws.com", 443)}), placeholder_keys(real), real), real


def test_the_s3_signature_error_shows_neither_the_uri_encoded_token_nor_its_hex_bytes() -> None:
    """The case found: an STS-like session token (base64, with '/', '+', '=') in the canonical request S3 prints
    for a presigned request, URI-encoded, and as hex bytes; the answer comes in pieces of 7 bytes."""
    token = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD+realtoken/abc+def=="
    resigner, real = resigner_of(token)
    target = (
        "/signature-mismatch/key?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=ASIAREALKEYID0000001%2F20250101"
        "%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Security-Token=" + quote(token, safe="") + "&X-Amz-Signature=00"
    )
    headers = [("host", "s3.us-east-1.amazonaws.com"), ("x-amz-security-token", token)]
    body = signature_mismatch("GET", target, headers)
    assert quote(token, safe="-_.~").encode() in body and token.encode().hex(" ").encode() in body  # the control
    out = masked(Masker(resigner.mask_pairs()), body, [7])
    assert len(out) == len(body)  # the same length: the answer's framing holds
    text = out.decode()
    canonical = re.search("<CanonicalRequest>(.*)</CanonicalRequest>", text, re.S)
    hexed = re.search("<CanonicalRequestBytes>(.*)</CanonicalRequestBytes>", text)
    assert canonical is not None and hexed is not None
    for secret in (token.encode(), real.access_key_id.encode()):
        assert leaked(secret, out) is None
        assert leaked(secret, unquote(canonical.group(1)).encode()) is None
        assert leaked(secret, unquote(bytes.fromhex(hexed.group(1)).decode()).encode()) is None
    placeholder = resigner.placeholder.session_token
    assert placeholder is not None and placeholder.reveal_bytes() in bytes.fromhex(hexed.group(1))


def test_a_header_value_holding_the_token_url_encoded_is_masked_too() -> None:
    token = "IQoJb3JpZ2luX2VjEJr/+/+abc" + secrets.token_urlsafe(40) + "=="
    resigner, _ = resigner_of(token)
    location = b"https://bucket.example/key?X-Amz-Security-Token=" + quote(token, safe="").encode()
    assert leaked(token.encode(), unquote(Masker(resigner.mask_pairs()).whole(location).decode()).encode()) is None


SECRET_TEXT = "".join(chr(c) for c in range(33, 127) if chr(c) not in '"\\')


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(alphabet=SECRET_TEXT, min_size=8, max_size=80),
    sizes=st.lists(st.integers(min_value=1, max_value=97), min_size=1, max_size=8),
)
def test_any_secret_in_any_of_its_spellings_is_masked_in_an_answer_split_anywhere(
    secret: str, sizes: list[int]
) -> None:
    stand_in = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in secret)
    body = json.dumps({"before": "x" * 5, "echo": encoded(secret), "after": "y"}).encode()
    out = masked(Masker([(secret.encode(), stand_in.encode())]), body, sizes)
    assert len(out) == len(body)
    for spelling, text in json.loads(out)["echo"].items():
        assert leaked(secret.encode(), decoded(spelling, text)) is None, (spelling, text)


# -- as a user would -------------------------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable()))
def test_an_api_echoing_a_kind_secret_encoded_shows_the_sandbox_none_of_it(
    service: Service,  # noqa: F811
    openbao: OpenBao,
) -> None:
    """A key with '+', '/' and '=' (URL-encoding changes it) in OpenBao's KV; curl in the sandbox sends its
    placeholder, the proxy the key, and the upstream answers the key it received URL-encoded, in base64 blobs
    and as hex: what the sandbox reads holds the placeholder so spelled, never the key."""
    key = "sk-proj-" + base64.b64encode(secrets.token_bytes(45)).decode() + "+/=="
    openbao.client().secrets.kv.v2.create_or_update_secret(path="llm/openai", secret={"api_key": key})
    inside = (
        "export NO_PROXY= no_proxy=\n"
        f'curl -sS -H "Authorization: Bearer $OPENAI_API_KEY" https://{service.host}/v1/echo-encoded\n'
        'echo; echo "placeholder=$OPENAI_API_KEY"\n'
    )
    result = service.env.run_process("exec", "--task", str(service.task()), "--", "sh", "-c", inside, timeout=120)
    assert result.code == 0, result.stderr
    assert received(service.api, "/v1/echo-encoded")["authorization"] == f"Bearer {key}"  # the key went upstream
    answer, _, rest = result.stdout.partition("\n")
    placeholder = rest.split("placeholder=", 1)[1].strip()
    spellings = json.loads(answer)["encoded"]["authorization"]
    assert set(spellings) == set(encoded(key))
    for spelling, text in spellings.items():
        seen = decoded(spelling, text)
        assert leaked(key.encode(), seen, kept=len("sk-proj-")) is None, (spelling, text)
        assert placeholder[12:-12].encode() in seen, (spelling, text)  # the stand-in, spelled the same way
    assert leaked(key.encode(), result.stdout.encode() + result.stderr.encode(), kept=len("sk-proj-")) is None


@pytest.mark.server
@pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable()))
def test_s3s_signature_error_through_the_resigner_shows_the_sandbox_no_real_token(
    aws_proxied: AwsProxied,
) -> None:
    """An upstream among the AWS credential's hosts answers as S3 does a request it cannot verify, printing the
    canonical request it computed from what it received, re-signed with the real keys: boto3's
    ``get_object`` (the token in a header) and curl on a presigned URL (the token URI-encoded in the query) in
    the sandbox read neither the real token nor the real key id, in any spelling."""
    api = RecordingAPI(aws_proxied.stack.ca.context)
    try:
        env, host = aws_proxied.env, f"127.0.0.1:{api.port}"
        env.providers["aws"]["proxy_hosts"] = [f"127.0.0.1:{aws_proxied.port}", host]
        env.write_config()
        task, both = aws_proxied.task(), f'["127.0.0.1:{aws_proxied.port}", "{host}"]'  # each host allowed
        for path in (env.policy_dir / "agents.yaml", task):
            path.write_text(path.read_text().replace(f'["127.0.0.1:{aws_proxied.port}"]', both))
        script = py(
            f"""
import json, subprocess
import boto3
from botocore.exceptions import ClientError
s3 = boto3.client("s3", endpoint_url="https://{host}")
try:
    s3.get_object(Bucket="signature-mismatch", Key="key")
except ClientError as error:
    print(json.dumps({{"header": error.response["Error"]}}))
url = s3.generate_presigned_url("get_object", Params={{"Bucket": "signature-mismatch", "Key": "key"}})
body = subprocess.run(["curl", "-sS", url], capture_output=True, text=True).stdout
print(json.dumps({{"query": body}}))
"""
        )
        result = aws_proxied.exec(task, script)
        assert result.code == 0, result.stdout + result.stderr
    finally:
        api.close()
    seen = lines_json(result)
    header_signed, presigned = api.seen[0], api.seen[1]
    token = dict((k.lower(), v) for k, v in header_signed.headers)["x-amz-security-token"]
    query_signed = dict(parse_qsl(urlsplit(presigned.path).query))
    assert query_signed["X-Amz-Security-Token"] == token  # the real token went upstream both ways
    assert quote(token, safe="-_.~") != token  # its URI-encoding differs from it (base64: '/', '+', '=')
    key_id = query_signed["X-Amz-Credential"].partition("/")[0]
    error = seen["header"]
    assert error["Code"] == "SignatureDoesNotMatch" and "CanonicalRequestBytes" in error
    query = seen["query"]
    hexed = re.search("<CanonicalRequestBytes>(.*)</CanonicalRequestBytes>", query)
    assert hexed is not None and "X-Amz-Security-Token=" in query
    for secret in (token.encode(), key_id.encode()):
        for text in (error["CanonicalRequest"], query):
            assert leaked(secret, unquote(text).encode()) is None
        for hexes in (error["CanonicalRequestBytes"], hexed.group(1)):
            assert leaked(secret, unquote(bytes.fromhex(hexes).decode()).encode()) is None
        assert leaked(secret, result.stdout.encode() + result.stderr.encode()) is None
