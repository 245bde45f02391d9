"""One serializer per format that leaves the platform, each well-formed whatever the text a
user typed (issue 28.7): :mod:`.bibtex`, :mod:`.cff` (CITATION.cff), :mod:`.tables` (CSV),
:mod:`.mail` (e-mail headers), and :mod:`.text`, what they share. HTML is the template
engine's (``szbench.web.common.templates``: autoescape on, bidirectional controls isolated).
Every serializer is fuzzed against a real parser of its format (tests/platform/
test_formats.py: pybtex in strict mode, cffconvert's schema check, the csv module, the
e-mail parser)."""
