"""How a name reads: one folding for every name people choose that others must not mistake
for another (API token names, team names).

Two names *read the same* when their skeletons are equal: compatibility forms folded
(full-width letters, ligatures, NFKC), case folded, only letters and digits kept (no blanks,
punctuation, soft hyphens, zero-width or bidirectional controls, combining marks), ASCII
look-alikes made one ("1" and "l" as "i", "0" as "o", "vv" as "w"). A name that mixes
scripts reads as an ASCII one too when they differ only where one of them has a letter
outside ASCII at a place where the other has one inside it (a Cyrillic small a, U+0430, for
the "a" of "Lab"): no table of confusable letters is needed for a name spelled to pass as
another. Names wholly in another script are compared by their skeletons only, so that two
teams may be called "北京组" and "上海组".
"""

from __future__ import annotations

import unicodedata

# ASCII characters read as another in a name ("web sess1on", "vveb session"); both sides of
# the comparison are mapped, so the map only has to send each look-alike to one letter.
_LOOKALIKES = str.maketrans({"0": "o", "1": "i", "l": "i", "|": "i", "3": "e", "5": "s", "8": "b"})


def skeleton(name: str) -> str:
    """``name`` as it reads.

    >>> skeleton("\uff2c\uff41\uff42\u200b 1") == skeleton("lab-l")
    True
    """
    folded = unicodedata.normalize("NFKC", name).casefold()
    kept = "".join(c for c in folded if unicodedata.category(c)[0] in "LN")
    return kept.translate(_LOOKALIKES).replace("vv", "w")


def reads_as(name: str, other: str) -> bool:
    """Whether ``name`` reads as ``other`` (see the module's rule).

    >>> reads_as("L\u0430b", "Lab"), reads_as("Lab", "Lab 2"), reads_as("北京组", "上海组")
    (True, False, False)
    """
    mine, theirs = skeleton(name), skeleton(other)
    if mine == theirs:
        return True
    if len(mine) != len(theirs) or not (_has_ascii(mine) and _has_ascii(theirs)):
        return False
    return all(a == b or a.isascii() != b.isascii() for a, b in zip(mine, theirs, strict=True))


def _has_ascii(text: str) -> bool:
    return any(c.isascii() for c in text)


def cleaned(name: str) -> str:
    """A chosen name as it is stored and shown: compatibility forms folded (NFKC), invisible
    format characters (zero-width and bidirectional controls) removed, runs of blanks made
    one space.

    >>> cleaned("  Lab\u202e  A\u200b ")
    'Lab A'
    """
    folded = unicodedata.normalize("NFKC", name)
    shown = "".join(c for c in folded if unicodedata.category(c) != "Cf")
    return " ".join(shown.split())
