"""Tcl-like word splitting with no evaluation: words are split the way Tcl splits them
("quoted", {braced}, backslash escapes, ``;`` between commands), but ``[command substitution]``
and ``$variables`` are refused with an error, so no command text is ever run as code."""
from __future__ import annotations

from .table import CommandError

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_SEPARATORS = " \t\r\n;"  # what ends a word


def _backslash(s: str, i: int) -> tuple[str, int]:
    """Decode the escape starting at s[i] == '\\'; returns (text, next index)."""
    if i + 1 >= len(s):
        return "\\", i + 1
    c = s[i + 1]
    if c in _ESCAPES:
        return _ESCAPES[c], i + 2
    if c == "\n":  # backslash-newline: one space
        j = i + 2
        while j < len(s) and s[j] in " \t":
            j += 1
        return " ", j
    if c == "x":
        j = i + 2
        while j < len(s) and j < i + 4 and s[j] in "0123456789abcdefABCDEF":
            j += 1
        if j > i + 2:
            return chr(int(s[i + 2:j], 16)), j
        return "x", i + 2
    return c, i + 2


def split_script(text: str) -> list[list[str]]:
    """Split ``text`` into commands (newline or ``;``) of words, Tcl style, without evaluating.

    Raises CommandError for ``[...]`` command substitution, ``$var`` substitution, unbalanced
    quotes or braces and characters after a closing quote or brace."""
    commands: list[list[str]] = []
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r":
            i += 1
            continue
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
            continue
        if c in "\n;":
            if words:
                commands.append(words)
                words = []
            i += 1
            continue
        if c == "#" and not words:  # comment to end of line
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c == "{":
            depth, j, buf = 1, i + 1, []
            while j < n:
                ch = text[j]
                if ch == "\\" and j + 1 < n:
                    if text[j + 1] == "\n":  # the one substitution inside braces
                        piece, j = _backslash(text, j)
                        buf.append(piece)
                        continue
                    buf.append(text[j:j + 2])
                    j += 2
                    continue
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        break
                buf.append(ch)
                j += 1
            if depth:
                raise CommandError("missing close-brace")
            words.append("".join(buf))
            i = _after_close(text, j, "brace")
            continue
        if c == '"':
            j, buf = i + 1, []
            while j < n and text[j] != '"':
                ch = text[j]
                if ch == "\\":
                    piece, j = _backslash(text, j)
                    buf.append(piece)
                    continue
                _check_substitution(text, j)
                buf.append(ch)
                j += 1
            if j >= n:
                raise CommandError('missing "')
            words.append("".join(buf))
            i = _after_close(text, j, "quote")
            continue
        # bare word
        j, buf = i, []
        while j < n and text[j] not in _SEPARATORS:
            ch = text[j]
            if ch == "\\":
                if j + 1 < n and text[j + 1] == "\n":
                    break
                piece, j = _backslash(text, j)
                buf.append(piece)
                continue
            _check_substitution(text, j)
            buf.append(ch)
            j += 1
        words.append("".join(buf))
        i = j
    if words:
        commands.append(words)
    return commands


def _after_close(text: str, j: int, closer: str) -> int:
    """The index after the closing quote or brace at ``text[j]``: Tcl ends the word there, so
    anything but a separator right after it is an error."""
    j += 1
    if j < len(text) and text[j] not in _SEPARATORS:
        raise CommandError(f"extra characters after close-{closer}")
    return j


def _check_substitution(text: str, j: int) -> None:
    ch = text[j]
    if ch == "[":
        raise CommandError("command substitution [...] is not supported (nothing is evaluated)")
    if ch == "$" and j + 1 < len(text) and (text[j + 1].isalnum() or text[j + 1] in "_{:"):
        raise CommandError("variable substitution ($...) is not supported (nothing is evaluated)")


def split_words(line: str) -> list[str]:
    """The words of one command (Tcl rules, no evaluation)."""
    cmds = split_script(line)
    if not cmds:
        return []
    if len(cmds) > 1:
        raise CommandError("one command expected (';' or a newline separates commands)")
    return cmds[0]


# ------------------------------------------------------------------------------------------------
# argument parsing helpers


