"""The page: the people an agent works for see its questions (the inbox), its work live (a task
page) and its tasks (the list and tree), served by the HTTP API under ``/ui``.

Plain HTML, CSS and small hand-written scripts in ``agent_tasks/server/page/``, served by the
product itself (no CDN, no build step): it works inside a network without internet. The scripts call
the HTTP API's own routes (``/inbox/stream``, ``/tasks/...``) with the page's session.

**Signing in**: a person signs in with an API key of the HTTP API (``agent-tasks keys create``);
the page keeps a session of that key in an HttpOnly, SameSite=Strict cookie
(``server.pagesessions``; ``AGENT_TASKS_PAGE_SESSION_HOURS``), never the key. Every request
that changes something carries the session's CSRF token (``server.auth``), and the
sign-in form itself carries a token of its own cookie (no one else's page can sign a person
in). A session sees its key's project only: another project's tasks are never found through it.

Every page answer has a Content-Security-Policy of ``'self'`` only (``PAGE_HEADERS``): no inline
script, no other origin, no framing.
"""

from __future__ import annotations

import html
import secrets
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from agent_tasks.broker import RevokedMessage, key_channel
from agent_tasks.server.apikeys import digest
from agent_tasks.server.auth import CSRF_COOKIE, SESSION_COOKIE, authenticate
from agent_tasks.server.errors import ApiError
from agent_tasks.server.pagesessions import csrf_token

PAGE_FILES = Path(__file__).resolve().parent / "page"
"""The page's HTML, CSS and scripts."""
PAGES = {"inbox": "inbox.html", "tasks": "tasks.html", "task": "task.html"}
"""``/ui/{page}`` -> its file."""
SIGNIN_COOKIE = "atk_signin"
"""The sign-in form's own CSRF cookie (set with the form, checked on its POST)."""
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

router = APIRouter(include_in_schema=False)


def static_files() -> StaticFiles:
    """The page's assets, mounted at ``/ui/static``."""
    return StaticFiles(directory=PAGE_FILES / "static")


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _signin_page(request: Request, error: str = "", status: int = 200) -> HTMLResponse:
    token = secrets.token_urlsafe(32)
    text = (PAGE_FILES / "signin.html").read_text(encoding="utf-8")
    text = text.replace("{{signin}}", token).replace("{{error}}", html.escape(error))
    response = HTMLResponse(text, status_code=status, headers=PAGE_HEADERS)
    response.set_cookie(
        SIGNIN_COOKIE, token, httponly=True, samesite="strict", secure=_secure(request), path="/ui"
    )
    return response


async def _signed_in(request: Request) -> bool:
    """Whether the request carries the cookie of a live page session."""
    session = request.cookies.get(SESSION_COOKIE)
    return bool(session) and await request.app.state.api.sessions.check(session) is not None


@router.get("/ui")
@router.get("/ui/")
async def home(request: Request) -> Response:
    """The inbox for a live session, else the sign-in form: one redirect from the page's
    address (``agent-tasks page`` prints ``/ui/``), never one to ``/ui`` and on."""
    return RedirectResponse("/ui/inbox" if await _signed_in(request) else "/ui/signin", 303)


@router.get("/ui/signin")
async def signin_form(request: Request) -> Response:
    """The sign-in form."""
    return _signin_page(request)


@router.post("/ui/signin")
async def signin(request: Request) -> Response:
    """Sign in with an API key (a form: ``key``, ``signin``): a session cookie and its CSRF
    cookie, then the inbox; the form again with the reason (401) for a key that is not valid,
    and 403 for a form that is not this page's own."""
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    sent = form.get("signin", [""])[0]
    expected = request.cookies.get(SIGNIN_COOKIE, "")
    if not expected or not secrets.compare_digest(sent, expected):
        return _signin_page(request, "the form expired: sign in again", status=403)
    state = request.app.state.api
    record = await state.keys.check(form.get("key", [""])[0].strip())
    if record is None:
        return _signin_page(request, "that API key is not valid (unknown or revoked)", 401)
    lifetime = timedelta(hours=state.settings.page_session_hours)
    token = await state.sessions.create(record, lifetime)
    response = RedirectResponse("/ui/inbox", status_code=303, headers=PAGE_HEADERS)
    secure, age = _secure(request), int(lifetime.total_seconds())
    response.set_cookie(
        SESSION_COOKIE, token, max_age=age, httponly=True, samesite="strict", secure=secure
    )
    response.set_cookie(
        CSRF_COOKIE, csrf_token(token), max_age=age, samesite="strict", secure=secure
    )
    response.delete_cookie(SIGNIN_COOKIE, path="/ui")
    return response


@router.post("/ui/signout")
async def signout(request: Request) -> Response:
    """End the session (its CSRF token needed, as for every change) and forget its cookies."""
    state = request.app.state.api
    key = await authenticate(request, state.keys, state.sessions)
    token = request.cookies.get(SESSION_COOKIE, "")
    await state.sessions.delete(token)
    broker = state.services.broker
    if broker is not None:  # the session's open streams end at once (``grants``)
        ended = RevokedMessage(key_id=key.key_id, session=digest(token))
        await broker.publish([key_channel(key.key_id)], ended)
    response = Response(status_code=204, headers=PAGE_HEADERS)
    response.delete_cookie(SESSION_COOKIE)
    response.delete_cookie(CSRF_COOKIE)
    return response


@router.get("/ui/{page}")
@router.get("/ui/{page}/")
async def page(request: Request, page: str) -> Response:
    """A page (``PAGES``) for a live session, else the sign-in form (a trailing ``/`` is the
    same page: no redirect first)."""
    if page not in PAGES:
        raise ApiError(404, "not_found", "no such page")
    if not await _signed_in(request):
        return RedirectResponse("/ui/signin", status_code=303)
    text = (PAGE_FILES / PAGES[page]).read_text(encoding="utf-8")
    return HTMLResponse(text, headers=PAGE_HEADERS)
