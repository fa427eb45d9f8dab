// The tasks of the project: filtered by status, session, agent, time and a part of the name,
// in name order, a page at a time; read again every few seconds while the page is shown. A
// long goal shows its first lines, the whole of it one click away.

import { api, clipped, el, header, message, status, taskPage, when } from "./app.js";

const form = document.getElementById("filters");
const rows = document.getElementById("rows");
const state = document.getElementById("state");
const more = document.getElementById("more");
const REFRESH_MS = 5000;
let cursor = null;

function query(after) {
  const params = new URLSearchParams();
  for (const [name, value] of new FormData(form)) {
    if (!value) continue;
    params.set(name, name === "since" || name === "until" ? new Date(value).toISOString() : value);
  }
  if (after) params.set("after_name", after);
  params.set("limit", "50");
  return `/tasks?${params}`;
}

async function load(after = null) {
  const answer = await api(query(after));
  if (!answer.ok) { state.textContent = message(answer); return; }
  // a read again keeps the goals the person opened
  const opened = new Set([...rows.querySelectorAll("tr:has(details[open])")].map((tr) => tr.dataset.task));
  const made = answer.data.tasks.map((t) => el("tr", { "data-task": t.name },
    el("td", {}, el("a", { href: taskPage(t.name) }, t.name)),
    el("td", { class: "nowrap" }, status(t.status)), el("td", { class: "goal" }, clipped(t.goal, { chars: 120 })),
    el("td", {}, t.session_id || ""), el("td", {}, t.agent_id || ""), el("td", {}, when(t.created_at))));
  for (const tr of made) if (opened.has(tr.dataset.task)) tr.querySelector("details")?.setAttribute("open", "");
  if (after) rows.append(...made); else rows.replaceChildren(...made);
  cursor = answer.data.next_after_name;
  more.hidden = !cursor;
  state.textContent = rows.children.length ? `${rows.children.length} tasks shown` : "No task matches.";
  document.body.dataset.ready = "true";
}

form.addEventListener("submit", (e) => { e.preventDefault(); load(); });
more.addEventListener("click", () => load(cursor));
header("tasks");
load();
setInterval(() => { if (!document.hidden && !cursor) load(); }, REFRESH_MS);
