"""Check the links of the built documentation site (``make docs``).

``mkdocs build --strict`` already refuses a page that links to a missing
page or anchor. This reads what it wrote: every relative ``href`` and
``src`` of every HTML page must lead to a file of the site, and a
``#fragment`` to an ``id`` on that page. Links to other hosts are listed,
not fetched (the build has no network).

Usage: python scripts/check_site_links.py [SITE_DIR]   (default build/site)
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id":
                self.ids.add(value)
            elif name in ("href", "src"):
                self.links.append(value)


def _read(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def broken_links(site: Path) -> tuple[list[str], int]:
    """The broken links of every page as ``page: link`` lines, and how many
    links to other hosts were seen."""
    pages = {path: _read(path) for path in sorted(site.rglob("*.html"))}
    broken: list[str] = []
    external = 0
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "data:")):
                external += 1
                continue
            base = site if parts.path.startswith("/") else path.parent
            target = (base / unquote(parts.path).lstrip("/")).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{path.relative_to(site)}: {link}")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _read(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{path.relative_to(site)}: {link} (no such anchor)")
    return broken, external


def main(argv: list[str]) -> int:
    site = Path(argv[0] if argv else "build/site").resolve()
    if not (site / "index.html").is_file():
        print(f"check_site_links: no site at {site}: run mkdocs build first", file=sys.stderr)
        return 2
    broken, external = broken_links(site)
    for line in broken:
        print(f"broken link: {line}", file=sys.stderr)
    pages = sum(1 for _ in site.rglob("*.html"))
    print(
        f"site links: {pages} pages, {len(broken)} broken, {external} to other hosts (not fetched)"
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
