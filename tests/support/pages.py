"""What repro wrote into a report page, apart from the plotly.js bundle inlined in it (4.8 MB of
someone else's code, whose strings would match any search of the page's own text)."""

from __future__ import annotations

import re

from plotly.offline import get_plotlyjs


def own_text(page: str) -> str:
    bundle = get_plotlyjs()
    assert page.count(bundle) == 1, "plotly.js is not inlined exactly once"
    return page.replace(bundle, "")


def without_plotly(data: bytes) -> bytes:
    """A written file's bytes less the plotly.js bundle: a constant of someone else's code, in which
    short strings (a hex alphabet, `0123456789abcdef`) occur by chance."""
    return data.replace(get_plotlyjs().encode(), b"")


def urls(text: str) -> list[str]:
    return re.findall(r"https?://[^\s\"'<\\]+", text)


def assert_self_contained(page: str) -> None:
    """Nothing the page would fetch: no script or style from a file or a site, no image, no font."""
    own = own_text(page)
    for needle in ("<link", "<img", "<iframe", " src=", "@import", "url("):
        assert needle not in own, needle
    assert re.findall(r"<script[^>]*>", own) == [m for m in re.findall(r"<script[^>]*>", own)
                                                 if m in ("<script>", '<script type="text/javascript">')]
    # The only addresses written are the run's own loopback hops, shown as text.
    assert all(u.startswith("http://127.0.0.1") for u in urls(own)), urls(own)
