"""Text from files made inert before it is shown: names and notes that come from a profile, a
Hugging Face config or a job file are one bounded line without control characters for a
terminal, and escaped as well for markdown (a pull-request comment), where ``<!--`` would hide
the rest of the comment and ``@name`` would ping people, and for a matplotlib plot, where ``$...$``
is mathtext (a crash on anything it cannot parse).
"""

from __future__ import annotations

import re

#: The longest name or note shown, in characters; longer text is cut with an ellipsis.
MAX_SHOWN_CHARS = 200

# C0 and C1 controls, DEL, and the bidirectional overrides and isolates that reorder a line.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]+")
_MARKDOWN = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "@": "&#64;", "|": "&#124;", "\\": "\\\\", "`": "\\`", "*": "\\*",
             "_": "\\_", "[": "\\[", "]": "\\]", "#": "\\#", "!": "\\!", "~": "\\~"}
_MARKDOWN_CHARS = re.compile("[" + re.escape("".join(_MARKDOWN)) + "]")


def inert(text: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` as one line for a terminal: control characters (escape sequences, newlines, bidi
    overrides) become a space, and it is cut to ``limit`` characters. The cut comes first, so a
    megabyte of text costs no more than ``limit`` characters do."""
    raw = str(text)
    cut = len(raw) > limit
    line = _CONTROL.sub(" ", raw[: limit + 1]).strip()
    if cut or len(line) > limit:
        line = line[: max(limit - 1, 0)].rstrip() + "…"
    return line


def markdown(text: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` as inert markdown: ``inert``, then every character markdown or HTML acts on is
    escaped (``<!--`` shows as written, ``@user`` pings nobody, ``|`` does not split a table cell)."""
    return _MARKDOWN_CHARS.sub(lambda m: _MARKDOWN[m.group()], inert(text, limit))


def plot_label(text: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` as a literal matplotlib label: ``inert``, then every ``$`` escaped, so no part of
    it is read as mathtext (``$\\frac$`` in a model name would end the plot in a parse error)."""
    return inert(text, limit).replace("$", r"\$")


def short_path(path: object) -> str:
    """A path for a message, its middle cut when it is very long."""
    text = str(path)
    return text if len(text) <= 160 else f"{text[:60]}...{text[-80:]}"
