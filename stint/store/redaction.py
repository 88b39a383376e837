"""Masking passwords in connection strings and in libpq's messages about them.

libpq quotes the text it could not parse, password included; these helpers
are how the store says what was wrong without repeating the secret.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "mask_quoted", "password_candidate", "redact"]

REDACTED = "****"

# user:password@ in a URL's authority; greedy up to the last @, so a password
# holding an unencoded @ or space is masked whole (masking too much is fine).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:@/\s]*:)(?P<pw>.*)@")
# password=... as a conninfo keyword or a URL query parameter, quoted or not;
# an unterminated quote runs to the end of the text.
_KEYWORD_PASSWORD = re.compile(
    r"(?P<head>password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'?|\S+)", re.IGNORECASE
)
_QUOTED = re.compile(r'"[^"]*"')
# An API key (stk_) or a dashboard session token (sds_): its id stays, so a log
# line still says which; its secret goes (issue 22: the access log printed a key
# sent in a query string verbatim).
_TOKEN_SECRET = re.compile(r"(?P<head>\b(?:stk|sds)_[0-9a-f]{16}_)[A-Za-z0-9_-]+")


def redact(text: str) -> str:
    """``text`` with every password-looking part masked (URL user info, ``password=``,
    the secret of an API key or a dashboard session token)."""
    masked = _URL_PASSWORD.sub(lambda m: f"{m['head']}{REDACTED}@", text)
    masked = _TOKEN_SECRET.sub(lambda m: f"{m['head']}{REDACTED}", masked)
    return _KEYWORD_PASSWORD.sub(lambda m: f"{m['head']}{REDACTED}", masked)


def password_candidate(text: str) -> str | None:
    """The raw password text a (possibly malformed) connection string carries, if any."""
    for pattern in (_URL_PASSWORD, _KEYWORD_PASSWORD):
        match = pattern.search(text)
        if match and match["pw"]:
            return match["pw"].strip("'")
    return None


def mask_quoted(message: str, candidate: str | None) -> str:
    """A driver message on one line, with every quoted piece of the password masked
    and every quoted connection string redacted."""

    def quoted(match: re.Match[str]) -> str:
        inner = match.group(0)[1:-1]
        if candidate and inner and (candidate in inner or inner in candidate):
            return f'"{REDACTED}"'
        return f'"{redact(inner)}"'

    one_line = " ".join(message.split())
    return _QUOTED.sub(quoted, one_line)
