// What every page shares: the API over the page's session (CSRF token on every change), a DOM
// builder that only ever sets text (never HTML), the header with its navigation, SSE streams.

/** The session's CSRF token (its cookie is readable; the session cookie is not). */
export function csrf() {
  const found = document.cookie.split("; ").find((c) => c.startsWith("atk_csrf="));
  return found ? decodeURIComponent(found.slice("atk_csrf=".length)) : "";
}

let leaving = false;

/** Go to the sign-in form, once: a sign-out, a 401 answer and a stream's `unauthorized` can
 * all come at the same moment, and a second navigation would abort the first. */
export function toSignIn() {
  if (leaving) return;
  leaving = true;
  location.assign("/ui/signin");
}

/** Call the HTTP API: `{ok, status, data}`; a session that ended goes to the sign-in form. */
export async function api(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRF-Token"] = csrf();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) { toSignIn(); }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { error: { message: text } }; }
  return { ok: response.ok, status: response.status, data };
}

/** An element with attributes (`on*` functions become listeners) and children (text or nodes). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

/** The API path of a task (a name with `/` in it is one escaped segment). */
export const taskPath = (name) => `/tasks/${encodeURIComponent(name)}`;
/** The page of a task. */
export const taskPage = (name) => `/ui/task?name=${encodeURIComponent(name)}`;
/** A short local time. */
export const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");
/** A new request id (a retry of one write sends the same). */
export const requestId = () => crypto.randomUUID().replaceAll("-", "");

/** A task's status as text with its class (the colour is never the only sign). */
export const status = (value) => el("span", { class: `status ${value}` }, value);

/** The header: the site's navigation (the current page marked), the project, sign out. */
export async function header(current) {
  const bar = document.querySelector("header.bar");
  const link = (href, text, page) =>
    el("li", {}, el("a", { href, "aria-current": page === current ? "page" : null }, text));
  const out = el("button", { type: "button", onclick: signOut }, "Sign out");
  const who = el("span", { class: "who" });
  bar.replaceChildren(
    el("span", { class: "brand" }, "agent tasks"),
    el("nav", { "aria-label": "Pages" },
      el("ul", {}, link("/ui/inbox", "Inbox", "inbox"), link("/ui/tasks", "Tasks", "tasks"))),
    who, out);
  const me = await whoami();
  if (me) who.textContent = `${me.person} · project ${me.project_id} · key ${me.key_id}`;
  return me;
}

let signedIn = null;
/** Who the session is (`/me`: its project and key), read once per page. */
export function whoami() {
  signedIn ??= api("/me").then((answer) => (answer.ok ? answer.data : null));
  return signedIn;
}

/** `text` quoted for a POSIX shell when it needs it (a command shown to be copied). */
export const shellQuote = (text) => (/^[\w@%+=:,./-]+$/.test(text) ? text : `'${text.replaceAll("'", "'\"'\"'")}'`);

/** A long text clipped to its first lines, the whole of it one click away (`<details>`);
 * a short one as it is. */
export function clipped(text, { chars = 160 } = {}) {
  const value = text || "";
  if (value.length <= chars && !value.includes("\n")) return el("span", { class: "clip-short" }, value);
  return el("details", { class: "clip" },
    el("summary", { title: "Show all of it" }, el("span", { class: "clip-head" }, value.slice(0, chars).replace(/\s+/g, " ")),
      el("span", { class: "clip-more" }, ` … show all ${value.length.toLocaleString("en")} characters`)),
    el("div", { class: "clip-whole" }, value));
}

async function signOut() {
  await api("/ui/signout", { method: "POST" });
  toSignIn();
}

/** Follow an SSE stream: `handlers` by event name; returns a function that closes it. The
 * browser's EventSource reconnects by itself, sending the last id (Last-Event-ID); a stream
 * that ends with `unauthorized` (the session signed out or expired, its key revoked) is not
 * reconnected: the page goes to the sign-in form. */
export function follow(path, handlers, onState = () => {}) {
  const source = new EventSource(path, { withCredentials: true });
  source.addEventListener("unauthorized", () => {
    source.close();
    toSignIn();
  });
  for (const [name, handler] of Object.entries(handlers)) {
    source.addEventListener(name, (e) => handler(e.data ? JSON.parse(e.data) : null, e));
  }
  source.onopen = () => onState("open");
  source.onerror = () => onState(source.readyState === EventSource.CLOSED ? "closed" : "retrying");
  return () => source.close();
}

/** The error message of an API answer. */
export const message = (answer) =>
  answer.data && answer.data.error ? `${answer.data.error.code || answer.status}: ${answer.data.error.message}`
    : `HTTP ${answer.status}`;
