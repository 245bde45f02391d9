""" "Cite this": one citation written as BibTeX and as CITATION.cff (docs/web-ui.md, "Cite this").

Titles, names and notes come from users (an algorithm's title and authors, a dataset's
title), so each format is written by its serializer (:mod:`szbench.formats`), which keeps
it well-formed whatever the text: a BibTeX entry whose braces always balance, a CFF file
that the format's schema accepts. Citations are rendered when they are read, from the
stored data (a snapshot's frozen board): a snapshot taken before a serializer was fixed
comes out as safe as a new one. URLs are the site's address (``SZBENCH_PUBLIC_URL``) and a
path: never the request's Host header, which the caller writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

from szbench.config import get_settings
from szbench.formats import bibtex as bib
from szbench.formats import cff as cff_format
from szbench.formats.text import plain

if TYPE_CHECKING:
    from szbench.models import Dataset, DatasetVersion, Evaluation

Format = Literal["bibtex", "cff"]
MEDIA_TYPES: dict[str, str] = {
    "bibtex": "application/x-bibtex; charset=utf-8",
    "cff": "application/x-yaml; charset=utf-8",
}
_AUTHOR_SEPARATORS = re.compile(r"\s*(?:;|,|\band\b|&|\n)\s*")


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
    fields = [
        # Double braces keep the title's capitals as written.
        ("title", "{" + bib.escape(citation.title) + "}"),
        ("author", " and ".join("{" + bib.escape(a) + "}" for a in _authors_or_site(citation))),
        ("year", str(citation.released.year)),
        ("date", citation.released.strftime("%Y-%m-%d")),
        ("version", bib.escape(citation.version)),
        ("publisher", bib.escape(get_settings().citation_publisher)),
        ("howpublished", bib.in_argument(citation.url)),
        # Read verbatim by biblatex.
        ("url", bib.url(citation.url)),
        ("note", bib.escape(". ".join(citation.notes))),
    ]
    return bib.entry("misc", citation.key, fields)


def cff(citation: Citation) -> str:
    """``citation`` as a CITATION.cff file (Citation File Format 1.2.0, YAML)."""
    return cff_format.document(
        kind=citation.kind,
        title=citation.title,
        authors=_authors_or_site(citation),
        released=citation.released,
        url=citation.url,
        message=" ".join(
            [
                "If you use these results, please cite them as below.",
                # One sentence per note, as BibTeX's note has them: joined by spaces alone
                # they ran together ("... as below. Dataset version v1 manifest ...").
                *(_sentence(n) for n in citation.notes),
            ]
        ),
        version=citation.version,
        abstract=citation.abstract,
        keywords=citation.keywords,
    )


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
    return bib.key(citation.key).replace(":", "-") + ".bib"


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
