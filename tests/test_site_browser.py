"""The documentation site in a real browser (Playwright driving Debian's Chromium, which `make test` installs), served
over HTTP as a reader gets it: at 1280 px no table is wider than the page's content column, and searching a config
field's name finds that field first."""

import functools
import http.server
import shutil
import threading
from urllib.parse import urlsplit

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1280

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium on this machine: `make test` installs Debian's chromium package"
)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site without a log line per request."""

    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    yield page
    page.close()


# Each table's width and the width of the content column it sits in, with the table's first header cell to name it.
TABLE_WIDTHS = """() => {
  const column = document.querySelector("article.md-content__inner").getBoundingClientRect();
  return [...document.querySelectorAll("article table")].map((table) => {
    const box = table.getBoundingClientRect();
    const section = table.closest(".doc-object, .doc-contents")?.previousElementSibling?.id
      || table.closest("article").querySelector("h1").textContent;
    return {where: section, left: box.left - column.left, right: box.right - column.right, width: box.width,
            column: column.width, header: table.querySelector("th")?.textContent.trim()};
  });
}"""


def reference_paths(site) -> list[str]:
    return sorted(str(page.parent.relative_to(site)) for page in (site / "reference").rglob("index.html"))


def test_no_table_of_the_reference_is_wider_than_the_page_at_1280_px(site, served, page):
    measured = 0
    too_wide = []
    for path in reference_paths(site):
        page.goto(f"{served}/{path}/")
        tables = page.evaluate(TABLE_WIDTHS)
        assert len(tables) == (site / path / "index.html").read_text().count("<table")
        measured += len(tables)
        too_wide += [(path, table) for table in tables if table["right"] > 0.5 or table["left"] < -0.5]
    assert measured >= 90  # the reference's parameter, attribute, return and flag tables
    assert not too_wide, "\n".join(map(str, too_wide))


def test_the_measure_sees_a_table_that_is_too_wide(served, page):
    # The check above could pass for the wrong reason: a table whose cells cannot wrap is measured as too wide.
    page.goto(f"{served}/reference/configuration/")
    page.add_style_tag(content="article td, article th, article code { white-space: nowrap !important }")
    tables = page.evaluate(TABLE_WIDTHS)
    assert any(table["right"] > 0.5 for table in tables)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("label_smoothing", "reference/configuration/#aiayn.configuration_aiayn.AiaynTextConfig.label_smoothing"),
        ("sliding_window", "reference/configuration/#aiayn.local_attention_aiayn.SlidingWindowFields.sliding_window"),
        ("d_model", "reference/configuration/#aiayn.configuration_aiayn.AiaynConfig.d_model"),
    ],
)
def test_searching_a_config_fields_name_finds_the_field_first(served, page, query, expected):
    """Material lists the results by page, each page's best sections under it: the first section found is the
    field's entry."""
    page.goto(f"{served}/")
    # Typed key by key, as a user types: Material reads the box on each keyup and when its search worker is ready;
    # `fill` sends no keyup, so a query filled in after the worker was ready would never be searched.
    page.locator("input.md-search__input").press_sequentially(query)
    results = page.locator(".md-search-result__item a")
    results.first.wait_for(timeout=20_000)
    sections = [urlsplit(link) for link in results.evaluate_all("(links) => links.map((link) => link.href)")]
    first = next(link for link in sections if link.fragment)
    assert f"{first.path.lstrip('/')}#{first.fragment}" == expected
