"""The documentation site in a real browser (Playwright driving Debian's Chromium, which `make test` installs), opened
from disk (`file://`) as a reader who built it with `make docs` opens it: its navigation leads to pages, its search
works, at 1280 px no table is wider than the page's content column and no code block of lines within the code's
119 characters scrolls, at 390 px no table is wider than the screen, and searching a config field's name, or its
transformers name, finds that field first."""

import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1280

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium on this machine: `make test` installs Debian's chromium package"
)


@pytest.fixture(scope="module")
def served(site) -> str:
    """The site's address from disk: pages open as `{served}/reference/train.html`."""
    return site.as_uri()


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
    return sorted(str(page.relative_to(site)) for page in (site / "reference").rglob("*.html"))


def test_no_table_of_the_reference_is_wider_than_the_page_at_1280_px(site, served, page):
    measured = 0
    too_wide = []
    for path in reference_paths(site):
        page.goto(f"{served}/{path}")
        tables = page.evaluate(TABLE_WIDTHS)
        assert len(tables) == (site / path).read_text().count("<table")
        measured += len(tables)
        too_wide += [(path, table) for table in tables if table["right"] > 0.5 or table["left"] < -0.5]
    assert measured >= 90  # the reference's parameter, attribute, return and flag tables
    assert not too_wide, "\n".join(map(str, too_wide))


def test_the_measure_sees_a_table_that_is_too_wide(served, page):
    # The check above could pass for the wrong reason: a table whose cells cannot wrap is measured as too wide.
    page.goto(f"{served}/reference/configuration.html")
    page.add_style_tag(content="article td, article th, article code { white-space: nowrap !important }")
    tables = page.evaluate(TABLE_WIDTHS)
    assert any(table["right"] > 0.5 for table in tables)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("label_smoothing", "reference/configuration.html#aiayn.configuration_aiayn.AiaynTextConfig.label_smoothing"),
        (
            "sliding_window",
            "reference/configuration.html#aiayn.local_attention_aiayn.SlidingWindowFields.sliding_window",
        ),
        ("d_model", "reference/configuration.html#aiayn.configuration_aiayn.AiaynConfig.d_model"),
        # transformers' names of the fields, which the configs accept.
        ("hidden_size", "reference/configuration.html#aiayn.configuration_aiayn.AiaynConfig.hidden_size"),
        (
            "num_attention_heads",
            "reference/configuration.html#aiayn.configuration_aiayn.AiaynConfig.num_attention_heads",
        ),
    ],
)
def test_searching_a_config_fields_name_finds_the_field_first(site, served, page, query, expected):
    """Material lists the results by page, each page's best sections under it: the first section found is the
    field's entry."""
    page.goto(f"{served}/index.html")
    # Typed key by key, as a user types: Material reads the box on each keyup and when its search worker is ready;
    # `fill` sends no keyup, so a query filled in after the worker was ready would never be searched.
    page.locator("input.md-search__input").press_sequentially(query)
    results = page.locator(".md-search-result__item a")
    results.first.wait_for(timeout=20_000)
    sections = [urlsplit(link) for link in results.evaluate_all("(links) => links.map((link) => link.href)")]
    first = next(link for link in sections if link.fragment)
    assert f"{Path(first.path).relative_to(site)}#{first.fragment}" == expected


def test_from_disk_the_navigation_opens_pages_and_the_search_finds_them(site, served, page):
    page.goto(f"{served}/index.html")
    links = page.locator("nav.md-nav--primary a.md-nav__link[href]").evaluate_all("(a) => a.map((l) => l.href)")
    pages = {link.split("#")[0] for link in links}
    assert len(pages) >= 30
    # Each link names a file (a folder's link would open its listing from disk), and the file is there.
    assert all(link.startswith(served) and link.endswith(".html") for link in pages), sorted(pages)
    assert all(Path(urlsplit(link).path).is_file() for link in pages)
    page.locator("nav.md-nav--primary a.md-nav__link", has_text="aiayn train").first.click()
    page.wait_for_load_state()
    assert page.url == f"{served}/reference/train.html"
    assert page.title().startswith("aiayn train")
    page.locator("input.md-search__input").press_sequentially("pad_to_max_length")
    # The results of the whole query (those of its first letters show while it is typed), each link carrying it.
    results = page.locator('.md-search-result__item a[href*="h=pad_to_max_length"]')
    results.first.wait_for(timeout=20_000)
    found = {
        urlsplit(link)._replace(query="").geturl() for link in results.evaluate_all("(a) => a.map((l) => l.href)")
    }
    # Material indexes sections: the flag's rows are in the sections of the tasks that take it.
    assert f"{served}/reference/train.html#question-answering" in found


# The widest line of each code block, and whether the block scrolls sideways.
CODE_WIDTHS = """() => [...document.querySelectorAll("article pre > code")].map((code) => ({
  longest: Math.max(...code.textContent.split("\\n").map((line) => line.length)),
  scrolls: code.scrollWidth > code.clientWidth + 1,
}))"""


def test_at_1280_px_no_code_block_within_119_characters_a_line_scrolls(site, served, page):
    measured = []
    for html in sorted(site.rglob("*.html")):
        page.goto(html.as_uri())
        measured += [(str(html.relative_to(site)), block) for block in page.evaluate(CODE_WIDTHS)]
    fitting = [(path, block) for path, block in measured if block["longest"] <= 119]
    assert len(fitting) >= 500 and max(block["longest"] for _, block in fitting) == 119
    assert not [(path, block) for path, block in fitting if block["scrolls"]]


def test_at_390_px_no_table_of_the_reference_is_wider_than_the_screen(site, served, browser):
    phone = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        measured = 0
        too_wide = []
        for path in reference_paths(site):
            phone.goto(f"{served}/{path}")
            tables = phone.evaluate(TABLE_WIDTHS)
            measured += len(tables)
            too_wide += [(path, table) for table in tables if table["right"] > 0.5]
            # Each cell names its column where the row is stacked (the headers are hidden).
            assert phone.evaluate("() => [...document.querySelectorAll('article thead')].every((head) => "
                                  "getComputedStyle(head).display === 'none')")  # fmt: skip
        assert measured >= 90
        assert not too_wide, "\n".join(map(str, too_wide))
    finally:
        phone.close()
