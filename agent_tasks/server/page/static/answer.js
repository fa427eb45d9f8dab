// One open question or approval with its answer form (the inbox and the task page show these).

import { api, el, message, requestId, taskPage, taskPath, when } from "./app.js";
import { fieldId, refusalAt, schemaForm } from "./form.js";
import { howToAnswer } from "./how.js";

/** Send `answer` to the request; show the task's refusal with `showErrors` (`strip`: the part
 * of the refusal's path the form does not have). Returns true when the task took it. */
async function send(item, answer, showErrors, status, strip = "") {
  status.textContent = "Sending…";
  const body = { answer, input_id: item.input_id, request_id: requestId() };
  const sent = await api(`${taskPath(item.task)}/input`, { method: "POST", body });
  if (sent.ok) {
    status.textContent = "Answered: the task took it.";
    return true;
  }
  status.textContent = "";
  const error = sent.data && sent.data.error;
  if (error && error.code === "input_invalid") {
    const at = refusalAt(error.message);
    const path = at.path.startsWith(strip) ? at.path.slice(strip.length) : at.path;
    showErrors([{ path, message: `the task refused it: ${at.message}` }]);
  } else {
    status.textContent = message(sent);
  }
  return false;
}

/** A form that checks in the browser, then sends what `wrap` makes of its value. */
function answerForm(schema, root, initial, label, submitText, item, status, wrap, strip) {
  const form = schemaForm(schema, { root, initial, label });
  const node = el("form", { class: "answer", novalidate: true, onsubmit: async (e) => {
    e.preventDefault();
    const { value, errors } = form.read();
    form.showErrors(errors);
    if (errors.length) return;
    await send(item, wrap(value), form.showErrors, status, strip);
  } }, form.node, el("button", { type: "submit", class: "primary" }, submitText));
  return node;
}

/** The list item of an inbox item (`withTask`: name its task). */
export function inboxItem(item, { withTask = true } = {}) {
  const status = el("p", { role: "status", class: "muted" });
  const asked = el("span", { class: "when" }, `asked ${when(item.asked_at)}`,
    item.deadline ? ` · ${item.approval ? "expires" : "answer by"} ${when(item.deadline)}` : "");
  const task = withTask ? el("a", { href: taskPage(item.task) }, item.task) : null;
  const li = el("li", { class: "item", "data-task": item.task, "data-input": item.input_id });
  if (!item.approval) {
    const header = el("header", {}, el("span", { class: "kind" }, "Question"), task, asked);
    li.append(header, el("p", { class: "prompt" }, item.prompt),
      answerForm(item.json_schema, item.json_schema, undefined, "Answer", "Send the answer",
        item, status, (v) => v, ""), status, howToAnswer(item));
    return li;
  }
  const call = item.approval;
  let args;
  try { args = JSON.parse(call.arguments); } catch { args = call.arguments; }
  const header = el("header", {}, el("span", { class: "kind" }, "Approval"), task,
    el("span", {}, "tool ", el("code", {}, call.tool)), asked);
  const description = el("div", { class: "description" });
  description.innerHTML = call.description_html; // rendered with raw HTML escaped (server side)
  const panel = el("div", { class: "choice-panel" });
  const schema = item.json_schema;
  const argumentsSchema = (schema.properties && schema.properties.arguments) || {};
  // every decision names the call it was shown (its digest): a call changed since is refused
  const bound = (answer) => (call.digest ? { ...answer, digest: call.digest } : answer);
  const choose = (type) => send(item, bound({ type }), () => {}, status);
  const show = (node) => { panel.replaceChildren(node); panel.querySelector("input, textarea, select")?.focus(); };
  const edit = () => show(answerForm(argumentsSchema, schema, args, "Arguments", "Run with these arguments",
    item, status, (value) => bound({ type: "edit", arguments: value }), "arguments/"));
  const instead = () => show(answerForm({ type: "string", minLength: 1, title: "The tool's result, for the model" },
    schema, undefined, "Result", "Send instead of running", item, status, (text) => bound({ type: "answer", text }), "text"));
  const ignore = () => {
    // the reason is optional: sent, the model reads it after "the tool was not run"; one of
    // white space only is refused as the CLI refuses it (--reason), never sent as no reason
    const id = fieldId();
    const reason = el("textarea", { id, name: "reason", rows: 2, "aria-describedby": `${id}-error` });
    const error = el("span", { class: "error", id: `${id}-error`, role: "alert" });
    show(el("form", { class: "answer", novalidate: true, onsubmit: async (e) => {
      e.preventDefault();
      const text = reason.value.trim();
      const blank = reason.value !== "" && !text;
      error.textContent = blank ? "an empty reason: leave the field empty or say why" : "";
      if (blank) { reason.setAttribute("aria-invalid", "true"); reason.focus(); return; }
      reason.removeAttribute("aria-invalid");
      await send(item, bound(text ? { type: "ignore", text } : { type: "ignore" }), () => {}, status);
    } }, el("div", { class: "field" }, el("label", { for: id }, "Why not run it (optional, for the model)"), reason, error),
    el("button", { type: "submit", class: "primary" }, "Ignore the call")));
  };
  li.append(header, description,
    el("p", {}, "Arguments:"), el("pre", {}, typeof args === "string" ? args : JSON.stringify(args, null, 2)),
    el("p", { class: "muted" }, `step ${call.step_name} · runs under `, el("code", {}, call.idempotency_key),
      call.digest ? el("span", { class: "digest" }, " · call ", el("code", { title: call.digest }, call.digest.slice(0, 12))) : "",
      call.approvers > 1
        ? el("span", { class: "approvals" }, ` · approvals ${call.approved_by.length} of ${call.approvers}`,
          call.approved_by.length ? ` (${call.approved_by.join(", ")})` : "")
        : ""),
    el("div", { class: "choices", role: "group", "aria-label": `What to do with the call of ${call.tool}` },
      el("button", { type: "button", class: "primary", onclick: () => choose("accept") }, "Accept"),
      call.approvers > 1 ? "" : el("button", { type: "button", onclick: edit }, "Edit…"),
      el("button", { type: "button", onclick: instead }, "Answer instead…"),
      el("button", { type: "button", onclick: ignore }, "Ignore…")),
    panel, status, howToAnswer(item));
  return li;
}
