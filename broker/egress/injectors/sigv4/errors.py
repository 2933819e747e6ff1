"""The answer to a refused request: 403 and the XML error body the AWS SDKs and the AWS CLI parse and print.

S3 answers ``<Error><Code>..</Code><Message>..</Message></Error>``; STS and
the other query APIs answer ``<ErrorResponse><Error><Type>Sender</Type>
<Code>..</Code><Message>..</Message></Error><RequestId>..</RequestId>
</ErrorResponse>``. botocore reads either into ``ClientError`` and prints
``An error occurred (CODE) when calling the OP operation: MESSAGE``. The
shape follows the signature's service when it was read, else the caller's
guess from the host. Messages say that the broker's proxy refused, never
carry a key or token, and are escaped.
"""

from __future__ import annotations

import secrets
from xml.sax.saxutils import escape

from broker.egress.injectors.sigv4.canonical import S3_SERVICES
from broker.egress.injectors.sigv4.values import Header, Refusal

STATUS = 403
PREFIX = "broker egress proxy: "
NAMESPACES = {"sts": "https://sts.amazonaws.com/doc/2011-06-15/"}
#: The services whose SDKs read S3's error shape (S3 Express signs as ``s3express``).
S3_SHAPED = S3_SERVICES | {"s3express"}


def error_response(refusal: Refusal, host_service: str = "s3") -> tuple[int, list[Header], bytes]:
    """Status, headers and body answering ``refusal``; ``host_service`` picks the shape when the signature
    named no service (``s3`` for S3 hosts, ``sts`` for STS)."""
    service = refusal.service or host_service
    message = escape(PREFIX + refusal.message)
    request_id = secrets.token_hex(8).upper()
    if service in S3_SHAPED:
        code = refusal.reason.s3_code
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message><RequestId>{request_id}</RequestId></Error>"
        )
        content_type = b"application/xml"
    else:
        code = refusal.reason.query_code
        namespace = NAMESPACES.get(service)
        opening = f'<ErrorResponse xmlns="{namespace}">' if namespace else "<ErrorResponse>"
        body = (
            f"{opening}<Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        )
        content_type = b"text/xml"
    data = body.encode("utf-8")
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(data)).encode()),
        (b"x-amz-request-id", request_id.encode()),
    ]
    return STATUS, headers, data
