"""How numbers, secrets and a server's error answers appear in anything a person reads: one rule
each, used everywhere."""

from __future__ import annotations

import re

REDACTED = "[redacted]"


def number(value: float | int | None, missing: str = "-") -> str:
    """A count or a rate as people write it: 3, 2.5, 0.33 (never 3.0 or 0.3333333)."""
    if value is None:
        return missing
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


def without_secret(text: str, secret: str | None) -> str:
    """A server may echo the key back (a 401 page that quotes the header): never keep it."""
    return text.replace(secret, REDACTED) if secret else text


# How much of a non-200 answer's body a client reads (bounded: a server may send megabytes).
ERROR_BODY_LIMIT = 2048


def http_error_text(status: int, body: bytes, retry_after: str | None, secret: str | None) -> str:
    """A non-200 answer in one short, secret-free line: its status, its Retry-After if it sent one,
    and what of its body is text (a server that quotes the key back, as some 401 pages do, never
    gets it into our log; an HTML page is named as one)."""
    text = without_secret(body[:ERROR_BODY_LIMIT].decode("utf-8", "replace").strip().replace("\n", " "), secret)
    if "<html" in text.lower():
        # An error page says what it is in its title and who wrote it in its signature (nginx's
        # <center>nginx/1.22.1</center>): those, not the first bytes of its markup.
        title = re.search(r"<title>([^<]{1,80})</title>|<h1>([^<]{1,80})</h1>", text)
        signature = re.search(r"<hr><center>([^<]{1,40})</center>", text)
        text = ("HTML page (" + (title[1] or title[2]) + (f", {signature[1]}" if signature else "") + ")" if title
                else "HTML page (" + text[:120] + "...)")
    detail = f"HTTP {status}"
    if retry_after:
        detail += f" (Retry-After: {retry_after[:20]})"
    return f"{detail}: {text[:300]}" if text else detail
