"""One progress line on standard error, rewritten in place, and only on a terminal:
`fleet` (fetching and judging) and `lint-hiera` (resolving) show it."""

from __future__ import annotations

import sys


class TerminalLine:
    """Call it with the text to show; `clear()` erases the line once the work is done."""

    def __init__(self) -> None:
        self.on = sys.stderr.isatty()
        self.shown = False

    def __call__(self, text: str) -> None:
        if self.on:
            sys.stderr.write(f"\r\033[K{text}")
            sys.stderr.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
