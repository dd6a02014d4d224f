"""`/docs` (Swagger UI) and `/redoc` served by the gateway itself, so they render on a
machine without internet: the pages name only the gateway's own URLs.

The assets (Swagger UI's and ReDoc's dist bundles and a favicon) come from the
`fastapi-offline` package (MIT; it ships exactly the files FastAPI's page builders load
from a CDN by default) and are served from `ASSETS` by a `StaticFiles` mount. Swagger UI's
online validator is switched off: it would call out to validator.swagger.io.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs-assets"
#: The package that ships the assets, and their folder inside it.
PACKAGE, FOLDER = "fastapi_offline", "static"


def assets_dir() -> str:
    return str(files(PACKAGE) / FOLDER)


def install(app: FastAPI) -> None:
    """Add /docs, /redoc and the assets they load; `app` must be built with
    `docs_url=None, redoc_url=None` (FastAPI's own pages load from a CDN)."""
    app.mount(ASSETS, StaticFiles(directory=assets_dir()), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
