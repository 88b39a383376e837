// Stint dashboard: a few lines, no framework, no build step. Loaded with `defer`.
// Everything shown comes from the server's HTML or from event payloads set as
// text (never as HTML), so nothing a session carries can run as script here.
"use strict";

// Replace an element's content with the server-rendered fragment at data-refresh;
// an answer that comes back after a later request's is stale and dropped.
const asked = new WeakMap();
async function refresh(element) {
  const mine = (asked.get(element) || 0) + 1;
  asked.set(element, mine);
  const response = await fetch(element.dataset.refresh, {credentials: "same-origin"});
  const html = await response.text();
  if (asked.get(element) === mine && response.ok &&
      response.headers.get("content-type").startsWith("text/html")) {
    element.innerHTML = html;
  }
}

// The overview's figures and chart: re-rendered every data-every milliseconds.
const overview = document.getElementById("overview");
if (overview) {
  setInterval(() => refresh(overview).catch(() => {}), Number(overview.dataset.every));
}

// A session's events, live over Server-Sent Events (the same stream as /v1's).
const list = document.getElementById("events");
if (list) {
  const state = document.getElementById("stream-state");
  const panels = document.getElementById("panels");
  const source = new EventSource(list.dataset.stream);
  // Events that change what the side panels show: questions, turns, the journal,
  // waits, kept signals, the tree of children.
  const reloads = /^(turn\.|approval\.|effect\.|tool\.returned|model\.returned|wait\.|signal\.|child\.)/;
  let pending = null;
  source.onopen = () => { state.textContent = "live"; state.className = "badge live"; };
  source.onerror = () => { state.textContent = "reconnecting"; state.className = "badge"; };
  const show = (message) => {
    const event = JSON.parse(message.data);
    if (list.querySelector(`li[data-seq="${event.seq}"]`)) return;
    const item = document.createElement("li");
    item.dataset.seq = event.seq;
    item.className = "kind-" + event.kind.replaceAll(".", "-") + " fresh";
    for (const [cls, text] of [
      ["seq", String(event.seq)], ["kind", event.kind],
      ["at", event.created_at.replace("T", " ").slice(0, 19)],
      ["payload", JSON.stringify(event.payload).slice(0, 300)],
    ]) {
      const part = document.createElement(cls === "payload" ? "code" : "span");
      part.className = cls;
      part.textContent = text;
      item.append(part, " ");
    }
    const atBottom = list.scrollTop + list.clientHeight >= list.scrollHeight - 40;
    list.append(item);
    if (atBottom) list.scrollTop = list.scrollHeight;  // follow, unless the reader scrolled up
    if (panels && reloads.test(event.kind) && pending === null) {
      pending = setTimeout(() => { pending = null; refresh(panels).catch(() => {}); }, 150);
    }
  };
  for (const kind of JSON.parse(list.dataset.kinds)) source.addEventListener(kind, show);
  // A child's turn starting, waiting or ending is in the child's log, not this one:
  // while the page draws children, the panels are also re-read every data-every ms.
  if (panels) {
    setInterval(() => {
      if (panels.querySelector("li.child")) refresh(panels).catch(() => {});
    }, Number(panels.dataset.every));
  }
}
