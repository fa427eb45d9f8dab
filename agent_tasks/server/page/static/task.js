// A task: its summary, its events as a conversation streamed live (tokens as they come), its
// steps, decisions and child tasks, what it waits for, and the actions a person may take.
// A long task shows its newest PAGE events; earlier ones load a page at a time.

import { api, clipped, el, follow, header, message, status, taskPage, taskPath, when } from "./app.js";
import { inboxItem } from "./answer.js";

const PAGE = 200;
const name = new URLSearchParams(location.search).get("name") || "";
const path = taskPath(name);
const $ = (id) => document.getElementById(id);
const events = $("events");
const tokens = $("tokens");
let first = 1; // the oldest seq shown
let last = 0; // the newest
let ui = null;

const pretty = (text) => { try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; } };
const json = (text) => { try { return JSON.parse(text); } catch { return null; } };

function debounce(fn, ms) {
  let timer = null;
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

function summary(view) {
  document.title = `${view.name} · agent tasks`;
  $("title").textContent = view.name;
  const counts = Object.entries(view.step_counts).filter(([, n]) => n).map(([s, n]) => `${n} ${s}`).join(", ") || "none";
  const link = ui ? el("a", { href: `${ui.temporal_ui}/namespaces/${encodeURIComponent(ui.namespace)}/workflows/${encodeURIComponent(view.workflow_id)}`,
    rel: "noreferrer" }, "the workflow in the Temporal Web UI") : "";
  const rows = [
    ["Status", status(view.status)], ["Goal", clipped(view.goal)], ["Steps", counts],
    ["Events", `${view.last_seq}`], ["Runs", `${view.runs}`],
    // the agent that runs the task (none for a recorded task), and the agent id that wrote it
    // (the tasks list's "Agent id" column)
    ["Agent", view.agent ? `${view.agent.name} (tools: ${view.agent.tools.join(", ") || "none"})` : "none: an app records it"],
    ["Agent id", view.agent_id],
    ["Session", view.session_id || "—"],
    ["Parent", view.parent ? el("a", { href: taskPage(view.parent) }, view.parent) : "—"],
    ["Created", when(view.created_at)], ["Updated", when(view.updated_at)],
    ["Result", view.result ? clipped(view.result.text) : "—"], ["Error", view.error ? clipped(view.error.text) : "—"],
    ["Workflow", link],
  ];
  // a read again keeps what the person opened
  const opened = new Set([...$("summary").querySelectorAll("dd:has(> details[open])")].map((dd) => dd.dataset.field));
  $("summary").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-field": k.toLowerCase() }, v)]));
  for (const field of opened) $("summary").querySelector(`dd[data-field="${field}"] > details`)?.setAttribute("open", "");
  actions(view);
  $("seqs").textContent = `(${first > 1 ? `${first}–` : ""}${last} of ${view.last_seq})`;
}

function body(e) {
  const p = e.payload;
  switch (e.kind) {
    case "message": return el("div", { class: "text" }, p);
    case "tool_call": return [el("div", {}, "calls ", el("code", {}, e.name || "?")), el("pre", {}, pretty(p))];
    case "tool_result": return el("details", { open: p.length < 400 }, el("summary", {}, `result of ${e.name || "the call"} (${e.full_length} characters)`), el("pre", {}, p));
    case "input_request": {
      const asked = json(p) || {};
      return asked.approval ? el("div", {}, "asks a person to approve the call of ", el("code", {}, asked.approval.tool), ` (seq ${asked.approval.call_seq})`)
        : el("div", {}, `asks a person (${asked.input_id}): `, el("strong", {}, asked.prompt || ""));
    }
    case "input_response": return el("div", {}, e.name === "rejected" || e.name === "late" ? `an answer ${e.name}: ` : `${e.author} answered ${e.name}: `, el("code", {}, p));
    case "child_task": case "child_result": {
      const child = json(p) || {};
      const named = child.child || child.name || e.name;
      return el("div", {}, e.kind === "child_task" ? "started the child task " : "child task ",
        named ? el("a", { href: taskPage(named) }, named) : "", child.status ? ` ended ${child.status}: ${child.text || ""}` : "");
    }
    case "decision": return el("div", {}, el("strong", {}, "decided: "), p, e.cites && e.cites.events.length ? ` (cites seq ${e.cites.events.join(", ")})` : "");
    case "note": return el("div", {}, `${e.name || "note"}: ${p}`);
    default: return el("pre", {}, p);
  }
}

function eventNode(e) {
  const who = e.role || e.author;
  return el("li", { class: `event ${e.kind} ${e.role || ""}`, id: `seq-${e.seq}`, "data-seq": e.seq },
    el("div", { class: "meta" }, `#${e.seq} ${e.kind}${e.name ? ` ${e.name}` : ""} · ${who} · ${when(e.time)}`), body(e));
}

function append(e) {
  if (e.seq <= last) return;
  last = e.seq;
  events.append(eventNode(e));
  if (e.kind === "message" && e.role === "assistant") { tokens.hidden = true; tokens.textContent = ""; }
  refreshSide();
  if (["input_request", "input_response", "note"].includes(e.kind)) refreshInputs();
}

async function page(after, limit) {
  const answer = await api(`${path}/events?after_seq=${after}&limit=${limit}`);
  return answer.ok ? answer.data.events : [];
}

async function earlier() {
  const from = Math.max(0, first - 1 - PAGE);
  const older = await page(from, first - 1 - from);
  events.prepend(...older.map(eventNode));
  first = from + 1;
  $("earlier").hidden = first <= 1;
}

async function steps() {
  const answer = await api(`${path}/steps?limit=500`);
  if (!answer.ok) return;
  $("steps").replaceChildren(...answer.data.steps.map((s) => el("tr", {},
    el("td", {}, s.step_name), el("td", { class: `state ${s.state}` }, s.state), el("td", {}, `${s.attempt}`),
    el("td", {}, s.result_validity, s.result_event_seq ? el("a", { href: `#seq-${s.result_event_seq}` }, ` #${s.result_event_seq}`) : ""),
    el("td", { class: "key" }, el("code", {}, s.idempotency_key)))));
}

async function decisions() {
  const answer = await api(`${path}/decisions?limit=200`);
  if (!answer.ok) return;
  const items = answer.data.decisions.map((d) => el("li", {},
    el("a", { href: `#seq-${d.seq}` }, `#${d.seq}`), ` ${d.statement} — ${d.author} `,
    d.needs_review ? el("span", { class: "needs-review" }, "needs review") : el("span", { class: "muted" }, "current")));
  $("decisions").replaceChildren(...(items.length ? items : [el("li", { class: "muted" }, "none")]));
}

async function tree() {
  const answer = await api(`${path}/tree?depth=5`);
  if (!answer.ok) return;
  const byParent = new Map();
  for (const row of answer.data) {
    if (!byParent.has(row.parent)) byParent.set(row.parent, []);
    byParent.get(row.parent).push(row);
  }
  const branch = (row) => el("li", {}, el("a", { href: taskPage(row.name) }, row.name), " ", status(row.status),
    (byParent.get(row.name) || []).length ? el("ul", {}, byParent.get(row.name).map(branch)) : null);
  const root = answer.data.find((r) => r.depth === 0);
  const children = root ? byParent.get(root.name) || [] : [];
  $("tree").replaceChildren(children.length ? el("ul", { class: "tree" }, children.map(branch)) : el("p", { class: "muted" }, "none"));
}

async function inputs() {
  const answer = await api(`${path}/inputs`);
  if (!answer.ok) return;
  const items = answer.data.items.map((item) => inboxItem(item, { withTask: false }));
  $("inputs").replaceChildren(...(items.length ? items : [el("li", { class: "muted" }, "nothing")]));
}

async function view() {
  const answer = await api(path);
  if (answer.ok) summary(answer.data.view);
  else $("title").textContent = `${name}: ${message(answer)}`;
  return answer.ok ? answer.data.view : null;
}

const refreshSide = debounce(() => { steps(); decisions(); tree(); view(); }, 500);
const refreshInputs = debounce(inputs, 300);

const CLOSED = ["done", "failed", "cancelled"];

/** Offer only what the task's status and kind allow (the refusals a click would get are
 * never offered): Cancel while it runs; Resume or Continue for an agent task that failed or
 * was cancelled (Continue when its last turn was interrupted after its tools ran, Resume
 * otherwise); Branch once it has an event. The note says why the others are not offered. */
function actions(view) {
  const closed = CLOSED.includes(view.status);
  const again = Boolean(view.agent) && (view.status === "failed" || view.status === "cancelled");
  const interrupted = Boolean(view.agent_run && view.agent_run.turn_committed);
  $("actions-section").hidden = false;
  $("cancel").hidden = closed;
  if (closed) $("cancel-confirm").hidden = true;
  $("resume").hidden = !(again && !interrupted);
  $("continue").hidden = !(again && interrupted);
  $("branch").hidden = view.last_seq < 1;
  $("branch").elements.seq.max = String(view.last_seq);
  const note = !closed ? ""
    : !view.agent ? `The task has ended ${view.status}. An app recorded it: the app, not this page, would run it again.`
    : !again ? `The task has ended ${view.status}: there is nothing to cancel or run again.`
    : interrupted ? `The task ended ${view.status} after its tools ran: Continue asks the model again with what its last turn did (no call runs twice).`
    : `The task ended ${view.status}: Resume runs its last turn again (completed steps keep their results).`;
  $("actions-note").textContent = note;
}

async function act(what, body) {
  const state = $("action-state");
  state.textContent = `${what}…`;
  const answer = await api(`${path}/${what}`, { method: "POST", body });
  state.textContent = answer.ok ? `${what}: sent` : `${what}: ${message(answer)}`;
  return answer;
}

// a cancel is confirmed first: it stops the agent where it is
$("cancel").addEventListener("click", () => { $("cancel-confirm").hidden = false; $("cancel-no").focus(); });
$("cancel-no").addEventListener("click", () => { $("cancel-confirm").hidden = true; $("cancel").focus(); });
$("cancel-yes").addEventListener("click", async () => {
  $("cancel-confirm").hidden = true;
  await act("cancel", { cascade: $("cascade").checked });
});
$("resume").addEventListener("click", async () => { if ((await act("resume")).ok) location.reload(); });
$("continue").addEventListener("click", async () => { if ((await act("continue")).ok) location.reload(); });
$("branch").addEventListener("submit", async (e) => {
  e.preventDefault();
  const data = new FormData(e.target);
  const answer = await act("branch", { seq: Number(data.get("seq")), name: data.get("name") });
  if (answer.ok) $("action-state").append(" ", el("a", { href: taskPage(data.get("name")) }, "open the branch"));
});
$("earlier").addEventListener("click", earlier);

async function main() {
  ui = await header("tasks");
  const shown = await view();
  if (!shown) return;
  const after = Math.max(0, shown.last_seq - PAGE);
  const latest = await page(after, PAGE);
  first = after + 1;
  last = after;
  latest.forEach(append);
  $("earlier").hidden = first <= 1;
  summary(shown);
  steps(); decisions(); tree(); inputs();
  document.body.dataset.ready = "true";
  let close = () => {};
  let attempt = 1; // of the model call whose tokens are shown
  const end = (final) => {
    close(); // a closed task's stream ends: do not reconnect
    summary(final); steps(); decisions(); tree(); inputs(); // at once: the last word
    tokens.hidden = true;
    document.body.dataset.ended = final.status;
  };
  close = follow(`${path}/stream?after_seq=${last}`, {
    update: append,
    token(t) {
      // a token of a later attempt of the model call: the earlier attempt failed, its turn
      // was never recorded, so its text goes
      if ((t.attempt || 1) !== attempt) { tokens.textContent = ""; attempt = t.attempt || 1; }
      tokens.hidden = false; tokens.textContent += t.text;
    },
    done: end, failed: end, cancelled: end,
  });
}

main();
