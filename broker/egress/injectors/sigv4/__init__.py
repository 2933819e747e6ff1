"""SigV4 through the egress proxy: verify a request signed with a placeholder key, re-sign it with the real one.

The sandbox holds placeholder AWS keys; the proxy, terminating TLS for the
session's AWS hosts, checks each request's signature with the placeholder
secret and signs the same request again with the real STS keys, which never
enter the sandbox. ``Verifier.begin`` is the entry point
(``broker.egress.injectors.sigv4.verifier`` shows the whole exchange); ``error_response``
renders a ``Refusal`` as the XML error the SDKs print. botocore builds the
canonical requests and signatures; only the aws-chunked chunk chain is
written here (``chain``).
"""

from __future__ import annotations

from broker.egress.injectors.sigv4.errors import error_response
from broker.egress.injectors.sigv4.spool import SpoolLimits
from broker.egress.injectors.sigv4.values import Head, PayloadMode, Reason, Refusal, RequestRefused
from broker.egress.injectors.sigv4.verifier import Ending, Passage, Verifier
from broker.vocab.secret import AwsKeys

__all__ = [
    "AwsKeys",
    "Ending",
    "Head",
    "Passage",
    "PayloadMode",
    "Reason",
    "Refusal",
    "RequestRefused",
    "SpoolLimits",
    "Verifier",
    "error_response",
]
