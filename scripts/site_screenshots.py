"""Screenshots of the built documentation site at 1280 px, as a reader sees its pages in Chromium.

    make docs && .venv/bin/python scripts/site_screenshots.py site shots/

Each page's top and each named section (a class or a table), one PNG each, into the output folder."""

import argparse
import functools
import http.server
import shutil
import threading
from pathlib import Path

from playwright.sync_api import sync_playwright

SHOTS = {
    "configuration": ("reference/configuration/", "aiayn.configuration_aiayn.AiaynConfig"),
    "configuration-fields": ("reference/configuration/", "aiayn.configuration_aiayn.AiaynConfig.d_model"),
    "models": ("reference/models/", None),
    "models-decoder-head": ("reference/models/decoder/",
                            "aiayn.modeling_aiayn_decoder.AiaynDecoderForSequenceClassification.forward"),
    "models-encoder": ("reference/models/encoder/", None),
    "train": ("reference/train/", None),
    "train-task": ("reference/train/", "token-classification"),
}  # fmt: skip


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    handler = functools.partial(QuietHandler, directory=str(args.site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = f"http://127.0.0.1:{server.server_address[1]}"
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        for name, (path, anchor) in SHOTS.items():
            page.goto(f"{root}/{path}" + (f"#{anchor}" if anchor else ""))
            page.wait_for_timeout(300)
            page.screenshot(path=args.out / f"{name}.png")
            print(args.out / f"{name}.png")
        browser.close()
    server.shutdown()


if __name__ == "__main__":
    main()
