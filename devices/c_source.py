"""C source text as the vendor generators write it: comments removed with line numbers kept
(the ai8x-synthesis project importer and the pulp-nnx test-application importer read it)."""
from __future__ import annotations

import re

_LEXEME = re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)|\"(?:\\.|[^\"\\])*\"?|'(?:\\.|[^'\\])*'?",
                     re.S)


def strip_comments(text: str) -> str:
    """Remove // and /* */ comments, keeping newlines (line numbers) and string literals (an
    unterminated comment or literal runs to the end of the text)."""
    def keep(m: re.Match) -> str:
        lexeme = m.group(0)
        if lexeme.startswith("//"):
            return ""
        if lexeme.startswith("/*"):
            return "\n" * lexeme.count("\n")
        return lexeme
    return _LEXEME.sub(keep, text)
