// The inbox: every open question and approval of the project, newest first, live.

import { el, follow, header } from "./app.js";
import { inboxItem } from "./answer.js";

const list = document.getElementById("items");
const state = document.getElementById("state");
const count = document.getElementById("count");
const key = (item) => `${item.task}\u0000${item.input_id}`;
const shown = new Map();
let seen = new Set(); // the keys of this connection's snapshot (a reconnect sends it afresh)

function remove(k) {
  const node = shown.get(k);
  if (!node) return;
  shown.delete(k);
  if (node.contains(document.activeElement)) list.focus();
  node.remove();
}

function recount() {
  count.textContent = `(${shown.size})`;
  if (!shown.size) state.textContent = "Nothing is waiting for you.";
  else state.textContent = "";
}

function place(node, item) {
  // newest first: before the first item asked earlier
  const later = [...list.children].find((li) => li.dataset.asked < item.asked_at);
  node.dataset.asked = item.asked_at;
  list.insertBefore(node, later || null);
}

header("inbox");
follow("/inbox/stream", {
  ask(item) {
    seen.add(key(item));
    if (shown.has(key(item))) return;
    const node = inboxItem(item);
    shown.set(key(item), node);
    place(node, item);
    recount();
  },
  closed(gone) {
    remove(key(gone));
    recount();
  },
  ready() {
    for (const k of [...shown.keys()]) if (!seen.has(k)) remove(k);
    recount();
    document.body.dataset.ready = "true";
  },
}, (s) => {
  if (s === "open") seen = new Set();
  if (s === "retrying") state.textContent = "Reconnecting…";
});
list.tabIndex = -1;
