"""The manual's words (docs/reference.md): a key a loader reads, a table of keys, a hint a session's env carries.

"Manual" is the documentation of the config keys; a credential's ``reference`` is something else (the
provider's handle to revoke it, in the store and the log).

``broker.cli.manual`` renders the document from the core's own tables
and from what each provider type declares of itself (``ProviderManual``,
``Provider.manual()``): a new provider type documents its keys in its own
package, and a test keeps every table equal to what the loaders really read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    name: str
    kind: str
    required: bool
    description: str
    default: str = ""


@dataclass(frozen=True)
class Section:
    title: str
    path: str  # the document path the loaders read these keys at ("" for the top level)
    keys: tuple[Key, ...]
    intro: str = ""


@dataclass(frozen=True)
class Hint:
    name: str
    kind: str  # which credentials set it
    description: str


@dataclass(frozen=True)
class ProviderManual:
    """What a provider type's loaders read, and what its credentials put in a session's ``env``.

    ``config`` are the keys of its ``[providers.NAME]`` table besides ``type``
    (and ``proxy_hosts``/``upstream_ca_file``, which the core reads for a type
    with proxy facts); ``manifest`` and ``grant`` its keys of a manifest's
    ``credentials[]`` and a policy's ``rules[].grants[]`` (each description
    saying which type, or kind, reads it); ``sections`` the deeper manifest
    tables it reads; ``hints`` the names its credentials set; ``example`` the
    commented table ``broker init`` puts in a new config.
    """

    summary: str  # what the type is, one sentence ("Vault or OpenBao.")
    config: tuple[Key, ...]
    manifest: tuple[Key, ...]
    grant: tuple[Key, ...]
    example: str  # the commented [providers.NAME] table ``broker init`` writes (every line a comment)
    sections: tuple[Section, ...] = ()
    hints: tuple[Hint, ...] = ()
