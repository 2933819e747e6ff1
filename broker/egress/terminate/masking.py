"""What an answer never carries back: each secret, in every spelling an upstream may echo it in, becomes a stand-in.

An upstream can show a secret it received spelled otherwise than as its raw
bytes: a presigned request's canonical query holds an STS session token
URL-encoded (S3's ``SignatureDoesNotMatch`` prints it in
``<CanonicalRequest>``), the same error prints the request's bytes as hex,
byte by byte with spaces between (``<CanonicalRequestBytes>``), and an API
may echo what it received inside a base64 blob (a token, a cursor, Basic
credentials). ``spellings`` gives, for one secret and its stand-in of the
same length, each spelling of the secret with the same spelling of the
stand-in:

- the raw bytes;
- URL-encoded: every byte but letters, digits and ``-_.~`` as ``%XX``, the
  hex upper- or lower-case, and the path spelling (``/`` left as it is,
  what URL builders write in a path). The stand-in is escaped exactly where
  the secret is (a letter where the secret's byte is literal and the
  stand-in's would need escaping), so both spellings are as long;
- base64, in the standard and the URL-safe alphabet, at each of the three
  alignments a secret can have inside a longer encoded blob: the characters
  that depend on the secret's bytes alone. At each end up to two characters
  that also depend on the bytes around it stay as they are: they carry a
  few bits of its first or last byte, never a whole one. Base64 broken into
  lines (MIME's 76 characters) is not recognised;
- hex: plain and one byte at a time with spaces between (S3's), each in
  lower and upper case; of the raw bytes and of the URL-encoded spelling
  (a presigned request's canonical query, as S3's
  ``<CanonicalRequestBytes>`` shows it).

Every stand-in is as long as what it replaces, so an answer keeps its
length and its framing. A spelling other than the raw bytes shorter than
``MIN_SPELLING`` is left out: it would match ordinary text.

``Masker`` replaces every spelling in a body that arrives in pieces, split
anywhere: up to the longest spelling's length less one byte waits for the
next piece. Each spelling is one search of every piece (``bytes.replace``),
while they are few; past ``ONE_PASS`` spellings (two secrets and more: three
AWS keys have 37) a piece is first searched once for all of them together
(RE2, whose automaton reads each byte once whatever their number, about
650 MB/s here against 330 MB/s for 37 searches and 800 MB/s for one secret's
14), and only a piece holding one is searched again for each. The session's
interceptor spells each secret once, and compiles the search once, not for
each answer.
"""

from __future__ import annotations

import base64
import bisect
import string
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import re2

Pair = tuple[bytes, bytes]  # what must not come back, and what stands in its place (of the same length)
MIN_SPELLING = 8
#: Past this many spellings one RE2 search of a piece for all of them costs less than a search for each.
ONE_PASS = 20
UNRESERVED = frozenset((string.ascii_letters + string.digits + "-_.~").encode())
LETTERS = (string.ascii_letters + string.digits).encode()
URLSAFE = bytes.maketrans(b"+/", b"-_")
#: For a secret starting ``offset`` bytes into a base64 group: how many leading characters also hold the bytes
#: before it; and for a blob of ``n`` bytes, how many characters of its last, partial group hold its bytes alone.
_HEAD, _TAIL = (0, 2, 3), (0, 1, 2)


def spellings(secret: bytes, stand_in: bytes) -> tuple[Pair, ...]:
    """Each spelling of ``secret`` an answer may hold (see the module docstring), with the same spelling of
    ``stand_in``; a stand-in of another length stands in for the raw bytes only."""
    if len(stand_in) != len(secret):
        return ((secret, stand_in),)
    url = _url(secret, stand_in, b"%%%02X")
    spelled = [(secret, stand_in), url, _url(secret, stand_in, b"%%%02x"), _url(secret, stand_in, b"%%%02X", b"/")]
    for form, replacement in ((secret, stand_in), url):  # S3 prints a presigned request's query as hex bytes
        for hexed, hexed_replacement in (
            (form.hex().encode(), replacement.hex().encode()),
            (form.hex(" ").encode(), replacement.hex(" ").encode()),
        ):
            spelled += [(hexed, hexed_replacement), (hexed.upper(), hexed_replacement.upper())]
    for offset in range(3):
        form, replacement = _base64(secret, offset), _base64(stand_in, offset)
        spelled += [(form, replacement), (form.translate(URLSAFE), replacement.translate(URLSAFE))]
    pairs: dict[bytes, bytes] = {}
    for form, replacement in spelled:
        if form != replacement and (form == secret or len(form) >= MIN_SPELLING):
            pairs.setdefault(form, replacement)
    return tuple(pairs.items())


def _url(secret: bytes, stand_in: bytes, escape: bytes, kept: bytes = b"") -> Pair:
    literal = UNRESERVED.union(kept)
    form, replacement = bytearray(), bytearray()
    for byte, other in zip(secret, stand_in, strict=True):
        if byte in literal:
            form.append(byte)
            replacement.append(other if other in literal else LETTERS[other % len(LETTERS)])
        else:
            form += escape % byte
            replacement += escape % other
    return bytes(form), bytes(replacement)


def _base64(value: bytes, offset: int) -> bytes:
    """The base64 characters of ``value`` that depend on it alone, when it starts ``offset`` bytes into a group."""
    size = offset + len(value)
    return base64.b64encode(bytes(offset) + value)[_HEAD[offset] : 4 * (size // 3) + _TAIL[size % 3]]


def _search(forms: Iterable[bytes]) -> Any:
    """One RE2 search for any of ``forms``, byte for byte (Latin-1: a secret may hold any byte); None when RE2
    cannot compile that many (then each is searched, as with few)."""
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.never_capture = True
    options.log_errors = False  # RE2 would print the pattern (the secrets) to stderr
    try:
        return re2.compile(b"|".join(re2.escape(form) for form in forms), options)
    except re2.error:
        return None


class Spelled:
    """Secrets in all their spellings, longest first (one secret's spelling may hold another's): what a ``Masker``
    searches for, made once for a session's secrets rather than for every answer (``Interceptor.masker``)."""

    def __init__(self, pairs: Sequence[Pair], spell: Callable[[bytes, bytes], Sequence[Pair]] = spellings) -> None:
        forms = [form for secret, stand_in in pairs if secret for form in spell(secret, stand_in)]
        self.forms = tuple(sorted(forms, key=lambda pair: -len(pair[0])))
        self._lengths = [-len(form) for form, _ in self.forms]  # ascending, for ``bisect``
        self.longest = len(self.forms[0][0]) if self.forms else 0
        self.shortest = len(self.forms[-1][0]) if self.forms else 0
        self._any = _search(form for form, _ in self.forms) if len(self.forms) > ONE_PASS else None

    def absent_from(self, value: bytes) -> bool:
        """True when ``value`` surely holds no spelling (one search for all of them, when there are many); False
        when it may (then each is searched)."""
        return len(value) < self.shortest or (self._any is not None and self._any.search(value) is None)

    def fitting(self, size: int) -> Sequence[Pair]:
        """The spellings no longer than ``size`` bytes (the only ones a value of that size can hold), longest
        first."""
        if size < self.shortest:
            return ()
        if size >= self.longest:
            return self.forms
        return self.forms[bisect.bisect_left(self._lengths, -size) :]


class Masker:
    """Replaces each secret, in each of its spellings, by its stand-in in a body that arrives in pieces (a spelling
    may span two). ``spell`` gives a pair's spellings (``spellings``); a session's interceptor hands the
    ``Spelled`` it keeps instead of the pairs, so an answer does not spell its secrets again."""

    def __init__(
        self, pairs: Sequence[Pair] | Spelled, spell: Callable[[bytes, bytes], Sequence[Pair]] = spellings
    ) -> None:
        self._spelled = pairs if isinstance(pairs, Spelled) else Spelled(pairs, spell)
        self._keep = max(self._spelled.longest, 1) - 1
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        """What can go on now; up to the longest spelling's length less one byte waits for the next piece."""
        if not self._spelled.forms:
            return data
        buffer = self._replaced(self._carry + data if self._carry else data)
        cut = max(0, len(buffer) - self._keep)
        self._carry = buffer[cut:]
        return buffer[:cut]

    def flush(self) -> bytes:
        rest, self._carry = self._carry, b""
        return rest

    @property
    def spelled(self) -> Spelled:
        """What it searches for (a session's interceptor hands the same one to each answer)."""
        return self._spelled

    @property
    def active(self) -> bool:
        """Whether there is a secret to mask (then a compressed body, which cannot be checked, is refused)."""
        return bool(self._spelled.forms)

    def whole(self, value: bytes) -> bytes:
        """``value`` (a header value or reason, never in pieces) with each spelling replaced by its stand-in."""
        return self._replaced(value)

    def _replaced(self, value: bytes) -> bytes:
        if self._spelled.absent_from(value):  # nearly every piece, with many spellings: one search for all
            return value
        for form, replacement in self._spelled.fitting(len(value)):
            value = value.replace(form, replacement)
        return value
