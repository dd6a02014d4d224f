"""/docs and /redoc name no URL outside the gateway, and every asset they load is served
by it (services/gateway/docs_ui.py). The gateway's app is built, not run;
tests/integration/test_docs_ui.py renders /docs in headless Chromium with no network."""

from __future__ import annotations

import asyncio
import re
import shutil

import httpx

from services.gateway.app import build
from tests.support.cluster import short_run_dir
from weaseldb.core import config
from weaseldb.runtime.ring import Ring

#: Every URL an HTML page can make the browser fetch, and any absolute URL at all.
ATTRIBUTE_URL = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")
ABSOLUTE_URL = re.compile(r"(?:https?:)?//[\w.-]+")


def _pages() -> dict[str, httpx.Response]:
    run_dir = short_run_dir()
    settings = config.build({"store": f"dir:{run_dir / 'data'}", "run_dir": str(run_dir)})

    async def fetch() -> dict[str, httpx.Response]:
        ring = Ring()
        stage, asgi = build(settings, ring, 0)
        try:
            transport = httpx.ASGITransport(app=asgi)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                pages = {path: await client.get(path) for path in ("/docs", "/redoc")}
                for page in list(pages.values()):
                    for url in ATTRIBUTE_URL.findall(page.text):
                        pages[url] = await client.get(url)
                pages["/openapi.json"] = await client.get("/openapi.json")
                return pages
        finally:
            ring.close()
            await stage.store.close()

    try:
        return asyncio.run(fetch())
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def test_docs_pages_load_everything_from_the_gateway() -> None:
    pages = _pages()
    for path in ("/docs", "/redoc"):
        page = pages[path]
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert not ABSOLUTE_URL.findall(page.text), f"{path} names another host"
        assert "/openapi.json" in page.text
    loaded = {url: answer for url, answer in pages.items() if url.startswith("/docs-assets/")}
    assert {url.rsplit("/", 1)[1] for url in loaded} == {
        "swagger-ui-bundle.js",
        "swagger-ui.css",
        "redoc.standalone.js",
        "favicon.png",
    }
    for url, answer in loaded.items():
        assert answer.status_code == 200 and len(answer.content) > 1000, url
    assert pages["/openapi.json"].status_code == 200
    # The assets are served, not described: the API's description stays the API's.
    assert not any(p.startswith("/docs") for p in pages["/openapi.json"].json()["paths"])
