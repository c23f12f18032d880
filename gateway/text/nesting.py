"""What is open at a point of a text read character by character (gateway/text/stream.py): a code
span, a link's text or destination, a tag. `TextStream` cuts a unit only where nothing is open, so
a cut never splits `` `a. b` ``, `[see. this](url)` or `<break time="1s"/>`."""

from __future__ import annotations


class Nesting:
    """Fed each character in turn (`see`); `closed` when no code span, link or tag is open.

    Indices are into the text being read: `tag` is where an open `<tag` begins (-1: none),
    `tag_edge` where the last tag began or ended (-1: none yet), so a hard cut there leaves
    tags whole. A backslash escapes the character after it.
    """

    __slots__ = ("ticks", "brackets", "dest", "tag", "tag_edge", "escaped")

    def __init__(self) -> None:
        self.ticks = 0  # backticks seen (odd: a code span is open)
        self.brackets = 0
        self.dest = 0  # "](" ... ")" of a link
        self.tag = -1
        self.tag_edge = -1
        self.escaped = False

    def see(self, text: str, i: int) -> None:
        """Take `text[i]` into account (`text[i - 1]` was the character seen before it)."""
        ch = text[i]
        if self.escaped:
            self.escaped = False
            return
        if ch == "\\":
            self.escaped = True
        elif ch == "`":
            self.ticks += 1
        elif self.ticks % 2:
            return  # inside a code span nothing else counts
        elif self.tag >= 0:
            if ch == ">":
                self.tag, self.tag_edge = -1, i + 1
        elif ch == "[":
            self.brackets += 1
        elif ch == "]":
            self.brackets = max(0, self.brackets - 1)
        elif ch == "(" and i > 0 and text[i - 1] == "]":
            self.dest += 1
        elif ch == ")" and self.dest:
            self.dest -= 1
        elif i > 0 and text[i - 1] == "<" and (ch.isalpha() or ch in "/!"):
            self.tag = self.tag_edge = i - 1

    @property
    def closed(self) -> bool:
        return not (self.ticks % 2 or self.brackets or self.dest or self.tag >= 0)
