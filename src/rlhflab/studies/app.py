"""The rating page: one ASGI app per study, server-rendered, every answer a POST.

Routes (all under a rater's link; anything else is refused with 403):
- `GET  /r/TOKEN/`          the item to rate now (or "all done"), and the rater's progress
- `POST /r/TOKEN/`          a rating from the page's form, then back to the page (303)
- `GET  /r/TOKEN/api/next`  the same item as JSON, for programs that rate (bots, judges)
- `POST /r/TOKEN/api/rate`  a rating as JSON

The study's kind (studies/kinds) gives the page's template, the field that carries an
answer, what `api/next` shows and says about answering, and how an answer is kept.
- `GET  /r/TOKEN/rate.css`, `/r/TOKEN/rate.js`   the page's own style and keyboard keys

Security is the default: tokens are compared in constant time (`Study.rater_for`); an
answer must carry the nonce of the item it answers (a CSRF token only the page that
showed the item holds); the Host header must name the address served (DNS rebinding);
every response says `Content-Security-Policy: default-src 'self'` (no inline script can
run, so model text that slipped through as HTML would still be inert), `Referrer-Policy:
no-referrer` (the link's token never leaves in a Referer), `X-Content-Type-Options:
nosniff`, `Cache-Control: no-store`. Model text is untrusted: templates autoescape it.
"""

from __future__ import annotations

from importlib import resources
from typing import Sequence

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from rlhflab.studies.design import UNREADABLE
from rlhflab.studies.kind import StudyKind
from rlhflab.studies.kinds import kind_of
from rlhflab.studies.store import Rater, Study

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
ASSETS = {"rate.css": "text/css; charset=utf-8", "rate.js": "text/javascript; charset=utf-8"}
REFUSED = "This page needs a rater link with a valid token."


class SecurityHeaders:
    """ASGI middleware adding `SECURITY_HEADERS` to every HTTP response."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.extend((k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items())
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers if scope["type"] == "http" else send)


def create_app(study: Study, allowed_hosts: Sequence[str] = ("127.0.0.1", "localhost", "[::1]")) -> Starlette:
    """The study's app (module docstring). `allowed_hosts`: the Host headers accepted
    (`["*"]` for any, when serving on an address the app cannot know the names of)."""
    templates = Environment(loader=PackageLoader("rlhflab.studies", "templates"),
                            autoescape=select_autoescape(default=True, default_for_string=True))
    assets = {name: resources.files("rlhflab.studies").joinpath("static", name).read_bytes() for name in ASSETS}
    kind = kind_of(study.design)

    def rater_of(request: Request) -> Rater | None:
        return study.rater_for(request.path_params.get("token", ""))

    def page(request: Request) -> Response:
        rater = rater_of(request)
        if rater is None:
            return PlainTextResponse(REFUSED, status_code=403)
        served = study.next_item(rater)
        progress = study.progress(rater)
        html = templates.get_template(kind.page).render(
            design=study.design, served=served, shown=kind.shown(served) if served else {}, progress=progress,
            unreadable=UNREADABLE, notice=request.query_params.get("notice", ""))
        return HTMLResponse(html)

    async def answer_form(request: Request) -> Response:
        rater = rater_of(request)
        if rater is None:
            return PlainTextResponse(REFUSED, status_code=403)
        form = await request.form()
        outcome = await run_in_threadpool(_record, study, kind, rater, form.get("serve"), form.get("csrf"),
                                          form.get(kind.answer_field))
        if outcome == "forbidden":
            return PlainTextResponse("This answer does not carry the token of the item it answers.", status_code=403)
        notice = "" if outcome in ("recorded", "duplicate") else "?notice=" + outcome
        return RedirectResponse(f"./{notice}", status_code=303)

    def api_next(request: Request) -> Response:
        rater = rater_of(request)
        if rater is None:
            return JSONResponse({"error": REFUSED}, status_code=403)
        served = study.next_item(rater)
        progress = study.progress(rater)
        body = {"done": served is None, "rated": progress.rated, "to_go": progress.to_go, "kind": kind.name,
                **kind.answering(study.design)}
        if served is not None:
            body.update(serve=served.serve_id, csrf=served.nonce, prompt=served.prompt, **kind.shown(served))
        return JSONResponse(body)

    async def api_rate(request: Request) -> Response:
        rater = rater_of(request)
        if rater is None:
            return JSONResponse({"error": REFUSED}, status_code=403)
        answer = kind.answer_field
        expected = f"expected a JSON object {{serve, csrf, {answer}}}"
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": expected}, status_code=400)
        if not isinstance(body, dict):
            return JSONResponse({"error": expected}, status_code=400)
        outcome = await run_in_threadpool(_record, study, kind, rater, body.get("serve"), body.get("csrf"),
                                          body.get(answer))
        status = {"recorded": 200, "duplicate": 409, "unknown": 404, "forbidden": 403, "invalid": 400}[outcome]
        return JSONResponse({"outcome": outcome}, status_code=status)

    def asset(request: Request) -> Response:
        name = request.path_params["asset"]
        if rater_of(request) is None or name not in assets:
            return PlainTextResponse(REFUSED, status_code=403)
        return Response(assets[name], media_type=ASSETS[name])

    def refuse(request: Request) -> Response:
        return PlainTextResponse(REFUSED, status_code=403)

    def ask_for_slash(request: Request) -> Response:
        if rater_of(request) is None:
            return PlainTextResponse(REFUSED, status_code=403)
        return RedirectResponse(f"{request.path_params['token']}/", status_code=307)

    routes = [
        Route("/r/{token}/", page, methods=["GET"]),
        Route("/r/{token}/", answer_form, methods=["POST"]),
        Route("/r/{token}", ask_for_slash, methods=["GET"]),
        Route("/r/{token}/api/next", api_next, methods=["GET"]),
        Route("/r/{token}/api/rate", api_rate, methods=["POST"]),
        Route("/r/{token}/{asset}", asset, methods=["GET"]),
        Route("/{anything:path}", refuse, methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]),
    ]
    middleware = [Middleware(SecurityHeaders), Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))]
    return Starlette(routes=routes, middleware=middleware)


def _record(study: Study, kind: StudyKind, rater: Rater, serve: object, csrf: object, answer: object) -> str:
    try:
        serve_id = int(str(serve))
    except ValueError:
        return "unknown"
    if not 0 < serve_id < 2**63:  # SQLite's integers: a larger one is no serve of this study
        return "unknown"
    if not isinstance(csrf, str) or not csrf:
        return "forbidden"
    return kind.record(study, rater, serve_id, csrf, answer)
