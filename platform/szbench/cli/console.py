"""Consoles of the command line: wrapped for a person at a terminal, never for a pipe.

Rich wraps at 80 columns when the output is not a terminal, so an error naming a long path
would be split over lines and no longer found by grep. Output to a pipe, a file or a CI log
is therefore never hard-wrapped: long lines stay whole.
"""

from __future__ import annotations

from rich.console import Console

#: The width given to Rich when the output is not a terminal: wider than any real line.
UNWRAPPED_WIDTH = 100_000


def make_console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that wraps only at a terminal."""
    console = Console(stderr=stderr)
    if console.is_terminal:
        return console
    return Console(stderr=stderr, width=UNWRAPPED_WIDTH, soft_wrap=True)
