"""The page's address answers in one redirect, and no redirect of ours leaves the address a
browser used.

- ``/ui/`` (the address ``agent-tasks page`` prints) went to ``/ui`` (Starlette's trailing-slash
  redirect), then to ``/ui/inbox``, then to ``/ui/signin``: three hops; now one, to the inbox
  or to the sign-in form. ``/ui/inbox/`` is the inbox.
- Starlette's trailing-slash redirect names the scheme and host the server saw
  (Kludex/starlette#1396, #2748; eneo-ai/eneo#871, OpenHands/automation#245: behind a TLS proxy
  whose ``X-Forwarded-Proto`` uvicorn does not trust, ``Location: http://...``, and the
  browser leaves HTTPS): our redirects are relative.
"""

from __future__ import annotations

import httpx

from tests.server.conftest import Api, Project
from tests.server.test_people import _sign_in


async def hops(site: httpx.AsyncClient, path: str) -> list[tuple[int, str]]:
    """The redirects ``GET path`` goes through, each ``(status, Location)``, and the last
    answer's ``(status, path)``."""
    seen = []
    answer = await site.get(path)
    while answer.is_redirect:
        location = answer.headers["location"]
        seen.append((answer.status_code, location))
        answer = await site.get(location)
    return [*seen, (answer.status_code, answer.url.path)]


async def test_the_pages_address_answers_in_one_redirect(api: Api, project: Project) -> None:
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as site:
        for path in ("/ui/", "/ui"):
            assert await hops(site, path) == [(303, "/ui/signin"), (200, "/ui/signin")], path
        assert await hops(site, "/ui/inbox/") == [(303, "/ui/signin"), (200, "/ui/signin")]
        assert (await _sign_in(site, project.key)).status_code == 303
        for path in ("/ui/", "/ui"):
            assert await hops(site, path) == [(303, "/ui/inbox"), (200, "/ui/inbox")], path
        assert await hops(site, "/ui/inbox/") == [(200, "/ui/inbox/")]
        assert (await site.get("/ui/nope/")).status_code == 404


async def test_a_trailing_slash_redirect_keeps_the_browsers_scheme_and_host(
    api: Api, project: Project
) -> None:
    """``/tasks/`` through a proxy at ``https://tasks.example.com`` that uvicorn does not trust
    (so the server sees ``http``): the redirect to ``/tasks`` is a path, which the browser
    resolves against the address it used."""
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as site:
        moved = await site.get(
            "/tasks/?limit=2", headers={"Host": "tasks.example.com", **project.headers}
        )
        assert moved.status_code == 307
        assert moved.headers["location"] == "/tasks?limit=2"
        other = await site.get("/tasks/", headers={"Host": "elsewhere.example.com:8443"})
        assert other.headers["location"] == "/tasks"
        followed = await site.get(moved.headers["location"], headers=project.headers)
        assert followed.status_code == 200 and followed.json()["tasks"] == []
