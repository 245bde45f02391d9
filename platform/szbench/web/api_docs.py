"""The interactive API documentation (Swagger UI), served whole by the app: no CDN.

Clinical centres run szbench without internet, so Swagger UI's script and stylesheet come from
an installed package (fastapi-offline ships Swagger UI's dist files) instead of FastAPI's
default CDN links. FastAPI's own page also starts Swagger UI with an inline script; this page
starts it from a static file of ours (``static/api-docs.js``) and is sent with the same
Content-Security-Policy as every other page, which allows scripts from this origin only.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import Scope

from szbench.web import compressed
from szbench.web.common import Caller, render

SWAGGER_UI_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
#: The files of Swagger UI that the page loads; nothing else of the package is served.
SWAGGER_UI_FILES = frozenset({"swagger-ui-bundle.js", "swagger-ui.css"})


class _SwaggerUIFiles(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        if path not in SWAGGER_UI_FILES:
            raise HTTPException(status_code=404)
        return await super().get_response(path, scope)


def install(app: FastAPI, path: str) -> None:
    """Serve the docs page at ``path`` and Swagger UI's files under ``path/swagger-ui``."""
    openapi_url = app.openapi_url
    if openapi_url is None:
        raise ValueError("the API docs page needs the OpenAPI document (openapi_url)")
    files = compressed(_SwaggerUIFiles(directory=SWAGGER_UI_DIR))
    app.mount(f"{path}/swagger-ui", files, name="swagger-ui")

    @app.get(path, include_in_schema=False)
    def api_docs(request: Request, caller: Caller) -> HTMLResponse:
        """Swagger UI on this API's OpenAPI document, inside the site's header and footer."""
        root_path = request.scope.get("root_path", "")
        context = {"title": f"{app.title} API", "openapi_url": root_path + openapi_url}
        return render(request, "api_docs.html", caller, context)
