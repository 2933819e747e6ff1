"""The manual: the config, manifest and policy keys, one table per section, rendered to docs/reference.md.

Every key a loader reads is listed here or in its provider type's own
declaration (``Provider.manual()``, in the provider's package), and nothing
else: a test loads documents through the real loaders, records the keys they
read, and compares them with these tables; another test regenerates
docs/reference.md and compares it with the committed file. So neither the
docs nor the tables can drift from the code. The session environment's hints
are in ``env``; the operator config's core tables in ``config``, the task documents' (manifest, policy) in
``documents``.
"""

from __future__ import annotations

from typing import Any

from broker.cli.manual.config import CORE_CONFIG
from broker.cli.manual.documents import CORE_MANIFEST, CORE_POLICY, operations_sections
from broker.cli.manual.env import render_hints
from broker.vocab.manual import Key, Section
from providers.base import Provider
from providers.registry import provider_classes

PROXY_KEYS = (
    Key("proxy_hosts", "list", False, "HOST:PORT where inject: proxy puts this provider's secret in."),
    Key("upstream_ca_file", "path", False, "CA bundle the proxy checks those hosts against.", "the system's"),
)


def _provider_config(cls: type[Provider[Any]]) -> Section:
    type_row = Key("type", f'"{cls.type_name}"', True, cls.manual().summary)
    proxy = PROXY_KEYS if cls.proxy is not None else ()
    return Section(
        f'Config: [providers.NAME] type = "{cls.type_name}"',
        f"providers.{cls.type_name}",
        (type_row, *cls.manual().config, *proxy),
    )


def _with_provider_keys(section: Section, keys: tuple[Key, ...]) -> Section:
    return Section(section.title, section.path, section.keys + keys, section.intro)


def _inject_key() -> Key:
    proxied = ", ".join(sorted(cls.proxy.documented_as for cls in provider_classes() if cls.proxy is not None))
    return Key(
        "inject",
        "file | proxy",
        False,
        f"{proxied}: proxy = the files hold a placeholder, exec's proxy the secret.",
        "file",
    )


def _sections() -> tuple[tuple[Section, ...], tuple[Section, ...], tuple[Section, ...]]:
    """The config, manifest and policy sections: the core's, with each registered provider type's keys."""
    classes = provider_classes()
    manifest_keys = (_inject_key(), *(key for cls in classes for key in cls.manual().manifest))
    grant_keys = tuple(key for cls in classes for key in cls.manual().grant)
    config = (*CORE_CONFIG, *(_provider_config(cls) for cls in classes))
    manifest = (
        *CORE_MANIFEST[:-1],
        _with_provider_keys(CORE_MANIFEST[-1], manifest_keys),
        *(section for cls in classes for section in cls.manual().sections),
        *operations_sections("Manifest", "operations"),
    )
    policy = (
        *CORE_POLICY[:-1],
        _with_provider_keys(CORE_POLICY[-1], grant_keys),
        *operations_sections("Policy file", "rules[].operations"),
    )
    return config, manifest, policy


CONFIG, MANIFEST, POLICY = _sections()


def render() -> str:
    lines = [
        "# Reference",
        "",
        "Generated from `broker/cli/manual/` and each provider type's `manual.py` by",
        "`scripts/gen-docs`; a test keeps it equal to the keys the loaders really read. Do not edit by hand.",
    ]
    config, manifest, policy = _sections()  # the provider types registered now
    for part, sections in (("Operator config (TOML)", config), ("Task manifest", manifest), ("Policy files", policy)):
        lines += ["", f"## {part}"]
        for section in sections:
            lines += ["", f"### {section.title}", ""]
            if section.intro:
                lines += [section.intro, ""]
            lines += ["| key | type | required | default | meaning |", "|---|---|---|---|---|"]
            for key in section.keys:
                required = "yes" if key.required else "no"
                kind = key.kind.replace("|", "\\|")
                text = key.description.replace("|", "\\|")
                lines.append(f"| `{key.name}` | {kind} | {required} | {key.default} | {text} |")
    return "\n".join(lines + render_hints()) + "\n"
