"""Secrets out of anything numabench prints: the one place URLs are redacted.

A URL may carry a password (``http://USER:PASSWORD@HOST/...``, ``postgresql://u:pw@h/db``) or
one in its query (``?password=...``, ``?token=...``). Command lines and CI logs are read by
others, so every URL numabench shows, in a result line or an error, goes through
``redact_url``, and the CLI passes every error line through ``redact_text`` as well (a URL
quoted inside another library's message). Both work on text that does not parse as a URL
(``http://u:pw@[::1:9200/x``): they match patterns, they never call a URL parser that could
refuse it.
"""
from __future__ import annotations

import re

MASK = "***"
# query parameters that hold a secret (libpq's password=, an index's token or key)
SECRET_PARAMS = ("password", "passwd", "pwd", "token", "access_token", "api_key", "apikey", "secret")

# scheme://USER:PASSWORD@ : the password runs to the authority's last "@" (an unescaped "@" in
# a password is read as urllib reads it: the host is what follows the last one)
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#:@]*)"  # scheme://USER
                       r":(?P<secret>[^\s/?#]*)@(?=[^\s/?#@]*(?:[\s/?#]|$))")  # :PASSWORD@ before HOST
_PARAM = re.compile(r"(?P<head>[?&;\s](?:%s)=)(?P<secret>[^&#\s]*)" % "|".join(SECRET_PARAMS), re.IGNORECASE)


def redact_text(text: str) -> str:
    """``text`` with the password of every URL in it, and every secret query parameter's value,
    replaced by ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    return _PARAM.sub(lambda m: m["head"] + (MASK if m["secret"] else ""), text)


def redact_url(url: str) -> str:
    """``url`` (of any scheme, well formed or not) without its password: what numabench prints
    for it."""
    return redact_text(url)
