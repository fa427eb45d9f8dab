// How else to answer a request: its id, and the command that answers it from a terminal (the
// same as `agent-tasks run` prints), each with a Copy button.

import { el, shellQuote as q, whoami } from "./app.js";

/** The command that answers `item` in project `project`, run as `command` (`agent-tasks`, or
 * `./run` where the server was started from a checkout: `GET /me`). */
export function answerCommand(item, project, command = "agent-tasks") {
  const where = `--project ${q(project)}`;
  // the digest of the call shown: a call changed since is refused approval_stale
  const digest = item.approval && item.approval.digest ? ` --digest ${item.approval.digest.slice(0, 12)}` : "";
  return item.approval
    ? `${command} approve ${q(item.task)} ${q(item.input_id)} --accept${digest} ${where}`
    : `${command} input ${q(item.task)} --input-id ${q(item.input_id)} --json VALUE ${where}`;
}

async function copy(node, button) {
  try {
    await navigator.clipboard.writeText(node.textContent);
    button.textContent = "Copied";
  } catch {
    // no clipboard (an insecure origin, or refused): select it for the person to copy
    getSelection().selectAllChildren(node);
    button.textContent = "Selected: copy it";
  }
}

function copyButton(node, what) {
  const button = el("button", { type: "button", class: "copy", "aria-label": `Copy the ${what}` }, "Copy");
  button.addEventListener("click", () => copy(node, button));
  return button;
}

/** The request's id and its command, each copyable. */
export function howToAnswer(item) {
  const id = el("code", { class: "request-id" }, item.input_id);
  const command = el("code", { class: "command" }, answerCommand(item, "PROJECT"));
  whoami().then((me) => { if (me) command.textContent = answerCommand(item, me.project_id, me.command); });
  const other = item.approval ? " (or --edit JSON, --answer TEXT, --ignore)" : "";
  return el("div", { class: "how" },
    el("p", {}, "Request id ", id, " ", copyButton(id, "request id")),
    el("p", {}, "From a terminal: ", command, " ", copyButton(command, "command"), el("span", { class: "muted" }, other)));
}
