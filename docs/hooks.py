"""MkDocs hook: the site's start page is the README, so the two never drift apart.

docs/index.md holds only a marker; this hook replaces it with README.md, whose links point into
docs/ from the repository's root (`docs/families/bert.md`), rewritten to the site's paths.
"""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def on_page_markdown(markdown: str, page, config, files) -> str:
    """The README in place of the start page's marker; other pages unchanged."""
    if page.file.src_uri != "index.md":
        return markdown
    return re.sub(r"\]\(docs/", "](", README.read_text(encoding="utf-8"))
