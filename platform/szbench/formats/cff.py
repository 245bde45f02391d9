"""CITATION.cff (Citation File Format 1.2.0): a YAML document that the format's schema
accepts, whatever the text.

PyYAML's safe dumper writes it, every string double-quoted; on top of that each field
keeps to the schema: text on one line and never empty (the schema's ``minLength: 1``),
authors and keywords unique, the URL only when it is absolute (the schema's pattern: a site without
``SZBENCH_PUBLIC_URL`` has only paths), empty keywords left out.
"""

from __future__ import annotations

from datetime import datetime

import yaml

from szbench.formats.text import plain

VERSION = "1.2.0"


def document(
    *,
    kind: str,
    title: str,
    authors: list[str],
    released: datetime,
    url: str,
    message: str,
    version: str = "",
    abstract: str = "",
    keywords: list[str] | None = None,
) -> str:
    """The CITATION.cff file's text."""
    # The schema wants authors and keywords unique and non-empty.
    names = list(dict.fromkeys(n for n in (plain(a) for a in authors) if n))
    doc: dict[str, object] = {
        "cff-version": VERSION,
        "message": plain(message) or "Please cite as below.",
        "type": kind,
        "title": plain(title) or "Untitled",
        # CFF's entity form (a name alone): free-text authors say nothing of which part of
        # a name is the family name.
        "authors": [{"name": n} for n in names] or [{"name": "Unknown"}],
        "date-released": released.strftime("%Y-%m-%d"),
    }
    if url.startswith(("https://", "http://")) and len(url) > 8:
        doc["url"] = url
    if plain(version):
        doc["version"] = plain(version)
    if plain(abstract):
        doc["abstract"] = plain(abstract)
    words = list(dict.fromkeys(w for w in (plain(k) for k in keywords or []) if w))
    if words:
        doc["keywords"] = words
    text: str = yaml.dump(doc, Dumper=_Quoted, sort_keys=False, allow_unicode=True, width=100)
    return text


class _Quoted(yaml.SafeDumper):  # type: ignore[misc]
    """Every string value double-quoted (keys plain, as CFF tools look for them): a YAML 1.2
    reader (the CFF tools use one) takes an unquoted ``1e3`` for a number where PyYAML's
    YAML 1.1 rules saw a string."""


def _quoted(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')


def _mapping(dumper: yaml.SafeDumper, value: dict[str, object]) -> yaml.MappingNode:
    pairs = [
        (dumper.represent_scalar("tag:yaml.org,2002:str", key), dumper.represent_data(item))
        for key, item in value.items()
    ]
    return yaml.MappingNode("tag:yaml.org,2002:map", pairs)


_Quoted.add_representer(str, _quoted)
_Quoted.add_representer(dict, _mapping)
