"""Text a user controls stays inert in every format that leaves the platform (issue 28.7):
each serializer of szbench.formats, fuzzed with hypothesis against a real parser of its
format. BibTeX: pybtex in strict mode finds exactly one entry, whose title prints as the
text typed. CITATION.cff: cffconvert's schema check. CSV: the csv module reads back the
same rows and cells. E-mail: the parser finds the same headers, one line each. HTML: the
template engine escapes."""

from __future__ import annotations

import csv
import email
import io
import re
from datetime import datetime
from email import policy
from html.parser import HTMLParser

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from szbench import citations
from szbench.formats import mail, tables
from szbench.formats.text import plain
from szbench.web.common import templates
from tests.platform.citation_parsers import strict_entries, validate_cff

# Any text, weighted towards what breaks formats: braces, TeX and YAML syntax, quotes,
# separators, line breaks, controls, bidirectional overrides, lone surrogates.
NASTY = "{}\\%#&$_~^@,;=+-\"'`:|[]<>*!?\n\r\t\0\x0b\x1b\u2028\u202e\u200b\ud800"
text = st.text(alphabet=st.sampled_from(NASTY) | st.characters(), max_size=60)
FIXED = datetime(2026, 3, 1)

_PRINTED = {
    r"\textbackslash{}": "\\",
    r"\textasciitilde{}": "~",
    r"\textasciicircum{}": "^",
    r"\textbraceleft{}": "{",
    r"\textbraceright{}": "}",
    r"{\char64}": "@",
}
_TEX = re.compile("|".join(re.escape(e) for e in _PRINTED) + r"|\\(.)")


def _printed(field: str) -> str:
    return _TEX.sub(lambda m: _PRINTED.get(m.group(0)) or m.group(1), field)


def _citation(title: str, authors: list[str], version: str, note: str) -> citations.Citation:
    return citations.Citation(
        key="szbench-evaluation-1",
        kind="software",
        title=title,
        authors=authors,
        url="https://bench.example.org/algorithms/1?evaluation=1",
        released=FIXED,
        version=version,
        notes=[note],
        abstract=note,
        keywords=[title],
    )


@settings(max_examples=200, deadline=None)
@given(title=text, authors=st.lists(text, max_size=3), version=text, note=text)
def test_every_bibtex_citation_is_one_entry_in_strict_pybtex(
    title: str, authors: list[str], version: str, note: str
) -> None:
    out = citations.bibtex(_citation(title, authors, version, note))
    (entry,) = strict_entries(out)
    assert out.count("@") == 1  # a parser that splits on "@" finds one entry too
    # The title prints as typed (on one line, invisible characters as spaces).
    assert _printed(entry.fields["title"][1:-1]) == plain(title)
    assert entry.fields["url"] == "https://bench.example.org/algorithms/1?evaluation=1"


# cffconvert loads its schema for every file (about 1 s): fewer examples.
@settings(max_examples=25, deadline=None)
@given(title=text, authors=st.lists(text, max_size=3), version=text, note=text)
def test_every_cff_citation_passes_the_schema(
    title: str, authors: list[str], version: str, note: str
) -> None:
    out = citations.cff(_citation(title, authors, version, note))
    validate_cff(out)
    assert yaml.safe_load(out)["title"] == (plain(title) or "Untitled")


def test_a_cff_citation_without_a_public_address_passes_the_schema() -> None:
    # A site without SZBENCH_PUBLIC_URL has paths only; the schema wants absolute URLs.
    cit = _citation("A title", ["Ada"], "1", "note")
    out = citations.cff(citations.Citation(**{**cit.__dict__, "url": "/algorithms/1"}))
    validate_cff(out)
    assert "url" not in yaml.safe_load(out)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.lists(text, min_size=3, max_size=3), max_size=5))
def test_csv_reads_back_as_the_same_cells(rows: list[list[str]]) -> None:
    columns = ["a", "b", "c"]
    out = tables.csv_text([dict(zip(columns, r, strict=True)) for r in rows], columns)
    out.encode("utf-8")  # whatever the cells, the file encodes
    back = list(csv.reader(io.StringIO(out, newline="")))
    assert back == [columns] + [[tables.cell(v) for v in r] for r in rows]
    for r in back[1:]:
        assert not any(v.startswith(tables.FORMULA_START) for v in r)


@settings(max_examples=300, deadline=None)
@given(subject=text, body=text)
def test_a_mail_has_its_headers_and_no_other(subject: str, body: str) -> None:
    message = mail.message(
        sender="szbench <noreply@example.org>", to="user@example.org", subject=subject, body=body
    )
    parsed = email.message_from_bytes(message.as_bytes(), policy=policy.default)
    assert sorted(parsed.keys()) == sorted(
        ["From", "To", "Subject", "Content-Type", "Content-Transfer-Encoding", "MIME-Version"]
    )
    assert str(parsed["Subject"]) == mail.header(subject)
    assert str(parsed["To"]) == "user@example.org"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


@settings(max_examples=200, deadline=None)
@given(value=text)
def test_html_from_the_templates_keeps_text_as_text(value: str) -> None:
    html = templates.env.from_string('<p title="{{ v }}">{{ v }}</p>').render(v=value)
    parser = _Tags()
    parser.feed(html)
    parser.close()
    assert parser.tags == ["p"]


def test_a_mail_prints_released_figures_as_they_were_released() -> None:
    """A rounded figure (0.56) in a notification mail is not printed as 0.560: the third
    decimal would claim a precision the platform never released; an exact one keeps 3."""
    from szbench.notifications.kinds.evaluation import EvaluationEnded

    def lines(release: str, f1: float, fp: float) -> str:
        figures = {
            "event_f1": f1,
            "event_sensitivity": None,
            "event_precision": 0.5,
            "event_fp_rate": fp,
            "subjects": 12,
            "release": release,
        }
        payload = {"evaluation": {"figures": figures, "url": "https://x/e/1"}}
        return "\n".join(EvaluationEnded().mail_lines(payload))

    rounded = lines("rounded", 0.56, 12.0)
    assert "Event F1 0.56, sensitivity n/a, precision 0.5, false positives per day 12 " in rounded
    exact = lines("exact", 0.5634, 11.96)
    assert (
        "Event F1 0.563, sensitivity n/a, precision 0.500, false positives per day 11.960" in exact
    )
