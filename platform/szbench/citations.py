""" "Cite this": one citation written as BibTeX and as CITATION.cff (docs/web-ui.md, "Cite this").

Titles, names and notes come from users (an algorithm's title and authors, a dataset's
title), so every text field is escaped for BibTeX: a brace, ``%``, ``\\`` or ``#`` in a title
can neither end the field, start a comment nor run a TeX command. Characters that a reader
cannot see (controls, format characters such as U+202E, line separators) become spaces;
every other character is kept as it is, in UTF-8 (biber and BibTeX 8-bit read it). The
CITATION.cff file is written by PyYAML's safe dumper, which quotes whatever YAML would
otherwise read as syntax. URLs are the site's address (``SZBENCH_PUBLIC_URL``) and a path:
never the request's Host header, which the caller writes.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

import yaml

from szbench.config import get_settings
from szbench.errors import BadRequest

if TYPE_CHECKING:
    from szbench.models import Dataset, DatasetVersion, Evaluation

CFF_VERSION = "1.2.0"
Format = Literal["bibtex", "cff"]
MEDIA_TYPES: dict[str, str] = {
    "bibtex": "application/x-bibtex; charset=utf-8",
    "cff": "application/x-yaml; charset=utf-8",
}

# TeX's special characters, each as text that prints it. One pass over the string, so the
# backslash's replacement is not escaped again.
_BIBTEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "%": r"\%",
    "&": r"\&",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
_BIBTEX_SPECIAL = re.compile("|".join(re.escape(c) for c in _BIBTEX_ESCAPES))
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_AUTHOR_SEPARATORS = re.compile(r"\s*(?:;|,|\band\b|&|\n)\s*")


def plain(text: str) -> str:
    """``text`` on one line with what a reader cannot see as single spaces.

    >>> plain("A\\u202etitle\\nhere ")
    'A title here'
    """
    shown = "".join(" " if unicodedata.category(c) in _INVISIBLE else c for c in text)
    return " ".join(shown.split())


def bibtex_escape(text: str) -> str:
    r"""``text`` as the inside of a braced BibTeX field: prints as ``text`` and cannot end
    the field, start a comment or run a command.

    >>> bibtex_escape("50% {best} \\o/")
    '50\\% \\{best\\} \\textbackslash{}o/'
    """
    return _BIBTEX_SPECIAL.sub(lambda m: _BIBTEX_ESCAPES[m.group(0)], plain(text))


def split_authors(authors: str) -> list[str]:
    """The names in an algorithm's free-text authors field (separated by commas,
    semicolons, "and", "&" or lines).

    >>> split_authors("Ada Lovelace, C. Babbage and  Grace Hopper")
    ['Ada Lovelace', 'C. Babbage', 'Grace Hopper']
    """
    return [name for name in (plain(n) for n in _AUTHOR_SEPARATORS.split(authors)) if name]


def site_url(*segments: str) -> str:
    """The public address of a page: ``SZBENCH_PUBLIC_URL`` and the path, each segment
    percent-encoded; the bare path when no public address is set (docs/deployment.md)."""
    path = "/" + "/".join(quote(s, safe="+") for s in segments)
    return get_settings().public_url + path


@dataclass(frozen=True)
class Citation:
    """What one citation says, whatever its format."""

    key: str  # BibTeX key: ASCII letters, digits and -:._ only
    kind: Literal["software", "dataset"]
    title: str
    authors: list[str]
    url: str
    released: datetime
    version: str = ""
    abstract: str = ""
    # Free text for BibTeX's note and CFF's message (what exactly is cited).
    notes: list[str] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)


def _authors_or_site(citation: Citation) -> list[str]:
    return citation.authors or [get_settings().citation_publisher]


def bibtex(citation: Citation) -> str:
    """``citation`` as one BibTeX ``@misc`` entry (UTF-8)."""
    publisher = get_settings().citation_publisher
    fields = [
        # Double braces keep the title's capitals as written.
        ("title", "{" + bibtex_escape(citation.title) + "}"),
        ("author", " and ".join("{" + bibtex_escape(a) + "}" for a in _authors_or_site(citation))),
        ("year", str(citation.released.year)),
        ("date", citation.released.strftime("%Y-%m-%d")),
        ("version", bibtex_escape(citation.version)),
        ("publisher", bibtex_escape(publisher)),
        # Inside another command's argument, \url needs its % escaped (a TeX comment
        # otherwise); the url field itself is read verbatim (biblatex), so stays as it is.
        ("howpublished", r"\url{" + _bibtex_url(citation.url).replace("%", r"\%") + "}"),
        ("url", _bibtex_url(citation.url)),
        ("note", bibtex_escape(". ".join(citation.notes))),
    ]
    key = re.sub(r"[^A-Za-z0-9:._+-]", "-", citation.key)
    lines = [f"@misc{{{key},"]
    lines += [f"  {name} = {{{value}}}," for name, value in fields if value]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _bibtex_url(url: str) -> str:
    # The URL is built from the configured address and percent-encoded segments; a brace or
    # backslash would still break the field, so they are refused rather than mangled.
    if any(c in url for c in "{}\\ "):
        raise BadRequest(f"citation url: {url[:100]!r} holds a brace, backslash or blank")
    return url


def cff(citation: Citation) -> str:
    """``citation`` as a CITATION.cff file (Citation File Format 1.2.0, YAML)."""
    document: dict[str, object] = {
        "cff-version": CFF_VERSION,
        # One sentence per note, as BibTeX's note has them: joined by spaces alone they
        # ran together ("... as below. Dataset version v1 manifest ... Source: ...").
        "message": plain(
            " ".join(
                [
                    "If you use these results, please cite them as below.",
                    *(_sentence(n) for n in citation.notes),
                ]
            )
        ),
        "type": citation.kind,
        "title": plain(citation.title),
        # CFF's entity form (a name alone): the free-text authors field says nothing of
        # which part of a name is the family name.
        "authors": [{"name": a} for a in _authors_or_site(citation)],
        "date-released": citation.released.strftime("%Y-%m-%d"),
        "url": citation.url,
    }
    if citation.version:
        document["version"] = citation.version
    if citation.abstract:
        document["abstract"] = plain(citation.abstract)
    if citation.keywords:
        document["keywords"] = [plain(k) for k in citation.keywords]
    text: str = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
    return text


def _sentence(note: str) -> str:
    """A note as a sentence: ends with a full stop unless it ends with one already."""
    note = note.strip()
    return note if not note or note.endswith((".", "!", "?")) else note + "."


def render(citation: Citation, fmt: Format) -> str:
    return bibtex(citation) if fmt == "bibtex" else cff(citation)


def download_name(citation: Citation, fmt: Format) -> str:
    """``CITATION.cff`` (the format's own file name) or ``<key>.bib``."""
    if fmt == "cff":
        return "CITATION.cff"
    return re.sub(r"[^A-Za-z0-9._+-]", "-", citation.key) + ".bib"


def dataset_citation(dataset: Dataset, dv: DatasetVersion) -> Citation:
    """A dataset version as the platform holds it (its manifest checksum pins the data);
    the dataset's own citation text, which names its source, goes in the note."""
    notes = [f"Dataset version {dv.version}"]
    if dv.manifest_checksum:
        notes.append(f"manifest {dv.manifest_checksum}")
    if dataset.citation:
        notes.append(f"Source: {dataset.citation}")
    return Citation(
        key=f"szbench-dataset-{dataset.slug}-{dv.version}",
        kind="dataset",
        title=dataset.title or dataset.slug,
        authors=[],
        url=site_url("datasets", dataset.slug) + f"?version={quote(dv.version, safe='')}",
        released=dv.created_at,
        version=dv.version,
        abstract=dataset.description,
        notes=notes,
        keywords=["seizure detection", "EEG"],
    )


def evaluation_citation(evaluation: Evaluation) -> Citation:
    """An entry of a live board: what it is (algorithm version, image digest, dataset
    version, scorer), without figures, which move until a snapshot freezes them."""
    version = evaluation.algorithm_version
    algorithm = version.algorithm
    dv = evaluation.dataset_version
    return Citation(
        key=f"szbench-evaluation-{evaluation.id}",
        kind="software",
        title=algorithm.title or algorithm.name,
        authors=split_authors(algorithm.authors),
        url=site_url("algorithms", str(algorithm.id)) + f"?evaluation={evaluation.id}",
        released=evaluation.finished_at or evaluation.created_at,
        version=version.version,
        notes=[
            f"Image {evaluation.image_digest}",
            f"Evaluated on dataset {dv.dataset.slug} version {dv.version}",
            f"Scorer {evaluation.scorer_version}",
            f"Evaluation {evaluation.id}; for its figures cite a leaderboard snapshot",
        ],
        keywords=["seizure detection", "EEG", "SzCORE"],
    )
