"""The console's HTTP front: a Starlette (ASGI) application around `console.app.Console`.

Every page's work blocks (librdkafka calls, file reads, a child `reset-offsets`), so page endpoints are plain
functions, which Starlette runs in its thread pool: the event loop only moves bytes. The timeline is a
`StreamingResponse` over a sync iterator (also iterated in the pool), a chunk per counted partition. The
one async endpoint (the rewind POST) only reads its bounded form before handing the work to the pool."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from urllib.parse import parse_qs

import anyio
from markupsafe import escape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, StreamingResponse
from starlette.responses import Response as HTTPResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from chronolog.console.app import Console, Response, Target, error_page
from chronolog.console.render import Page, Renderer

MAX_FORM_BYTES = 64 << 10
FLUSH = "<!--flush-->"  # where a streamed page is sent on (after each progress line)
HTML = "text/html; charset=utf-8"
# Pages must not be framed by another site (a click-jacked "commit these offsets"); scripts and styles come
# from the console itself (the vendored chart included), nothing from elsewhere.
SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy",
     b"default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
]


def host_allowed(host: str) -> bool:
    """On a loopback address only loopback names may be asked for: a page of another site whose name was
    made to resolve to 127.0.0.1 (DNS rebinding) would otherwise read the console, CSRF token included."""
    host = host.strip().lower()
    name = host[1:].split("]")[0] if host.startswith("[") else host.rsplit(":", 1)[0]
    return name in ("127.0.0.1", "localhost", "::1") or name.startswith("127.")


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


class _Guard:
    """Pure ASGI (streamed bodies pass through untouched): the Host check, then the security headers on
    every answer."""

    def __init__(self, app, renderer: Renderer, loopback_only: bool) -> None:
        self.app, self.renderer, self.loopback_only = app, renderer, loopback_only

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.loopback_only:
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if not host_allowed(host):
                page = self.renderer.render(error_page(403, "this console answers only to loopback host names"))
                scope_send = self._with_headers(send)
                await HTMLResponse(page, 403)(scope, receive, scope_send)
                return
        await self.app(scope, receive, self._with_headers(send))

    @staticmethod
    def _with_headers(send):
        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)
        return sending


def _chunks(pieces: Iterator[str]) -> Iterator[bytes]:
    """Jinja2 yields a streamed page in small pieces; send them on at each FLUSH mark, not one by one."""
    buf: list[str] = []
    try:
        for piece in pieces:
            buf.append(piece)
            if FLUSH in piece:
                yield "".join(buf).encode()
                buf.clear()
        if buf:
            yield "".join(buf).encode()
    except Exception as exc:  # the status is sent already: the failure is a line at the end of the page
        from chronolog.console.app import LOG, internal_error
        LOG.exception("console: a streamed page failed")
        yield (f'<div class="error" role="alert">{escape(internal_error(exc))}</div></main></body></html>').encode()
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()


class _ClosingStream(StreamingResponse):
    """A streamed page closed when its response ends, however it ends, in a worker thread: its pieces (the
    generators that count) and then its page's `close` (the broker clients). Starlette leaves an iterator it
    did not finish (the browser went away) to the garbage collector, which runs in any thread that holds the
    GIL, a librdkafka thread included, where destroying a client is forbidden (confluent-kafka-python issues
    #1761, #2129); and a generator closed before it started never runs its `finally` at all."""

    def __init__(self, pieces: Iterator[bytes], close: Callable[[], None] | None, status: int) -> None:
        super().__init__(pieces, status, media_type=HTML)
        self._pieces, self._close = pieces, close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # Starlette's body iteration has stopped here (a cancelled thread call runs to its end first), so
            # nothing else uses the clients; shielded: a cancelled request closes them all the same
            with anyio.CancelScope(shield=True):
                await run_in_threadpool(self.release)

    def release(self) -> None:
        try:
            close_pieces = getattr(self._pieces, "close", None)
            if close_pieces is not None:
                close_pieces()
        finally:
            close, self._close = self._close, None
            if close is not None:
                close()


def create_app(target: Target, loopback_only: bool = True) -> _Guard:
    console = Console(target)
    renderer = Renderer(target.where)

    def respond(result: Page | Response) -> HTTPResponse:
        if isinstance(result, Response):
            return HTTPResponse(result.body, result.status, media_type=result.content_type)
        if result.stream:
            try:
                return _ClosingStream(_chunks(renderer.stream(result)), result.close, result.status)
            except BaseException:
                if result.close is not None:
                    result.close()
                raise
        return HTMLResponse(renderer.render(result), result.status)

    def query(request: Request) -> dict[str, list[str]]:
        return parse_qs(request.url.query, keep_blank_values=True)

    def page(method, *params: str):
        def endpoint(request: Request) -> HTTPResponse:  # sync: Starlette runs it in its thread pool
            args = [request.path_params[p] for p in params]
            return respond(console.answer(method, *args, query(request)))
        return endpoint

    async def rewind(request: Request) -> HTTPResponse:
        try:
            length = int(request.headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_FORM_BYTES:
            return respond(error_page(413 if length > MAX_FORM_BYTES else 400,
                                      f"a form is at most {MAX_FORM_BYTES} bytes with a Content-Length"))
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return respond(error_page(413, f"a form is at most {MAX_FORM_BYTES} bytes"))
        form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        result = await run_in_threadpool(console.answer, console.rewind, request.path_params["group"], form)
        return await run_in_threadpool(respond, result)

    def http_error(request: Request, exc: HTTPException) -> HTTPResponse:
        message = {404: f"no page at {request.url.path}",
                   405: f"{request.method} is not supported at {request.url.path}"}.get(exc.status_code, exc.detail)
        return respond(error_page(exc.status_code, message))

    def crashed(request: Request, exc: Exception) -> HTTPResponse:
        from chronolog.console.app import LOG, internal_error
        LOG.error("console: %s %s failed", request.method, request.url.path, exc_info=exc)
        return respond(error_page(500, internal_error(exc)))

    app = Starlette(routes=[
        Route("/", page(console.topics)),
        Route("/topics/{topic}", page(console.timeline, "topic")),
        Route("/topics/{topic}/records", page(console.records, "topic")),
        Route("/topics/{topic}/segments", page(console.segments, "topic")),
        Route("/api/topics/{topic}/timeline", page(console.timeline_json, "topic")),
        Route("/groups", page(console.groups)),
        # a group's name may hold '/', which arrives decoded: the path converter takes it whole
        Route("/groups/{group:path}/rewind", rewind, methods=["POST"]),
        Route("/groups/{group:path}", page(console.group, "group")),
        Mount("/static", StaticFiles(packages=[("chronolog.console", "static")])),
    ], exception_handlers={HTTPException: http_error, Exception: crashed})
    return _Guard(app, renderer, loopback_only)
