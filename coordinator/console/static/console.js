// Cohort console: plain DOM, no build step. Every text from the server goes through textContent.
"use strict";

const app = document.getElementById("app");
const statusLine = document.getElementById("status");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.message ? body.message : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error;
  }
}

async function api(path, options) {
  const response = await fetch(path, Object.assign({ headers: { "Accept": "application/json" } }, options || {}));
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

function post(path, body) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/json", "Accept": "application/json" },
                     body: JSON.stringify(body) });
}

const groupPath = (id) => `/api/groups/${encodeURIComponent(id)}`;
const groupLink = (id) => `#/group/${encodeURIComponent(id)}`;
const state = (name) => el("span", { class: `state state-${name}` }, name);
const table = (headers, rows, empty) => rows.length
  ? el("table", {}, el("thead", {}, el("tr", {}, headers.map(([text, cls]) => el("th", { class: cls }, text)))),
       el("tbody", {}, rows))
  : el("p", { class: "muted" }, empty);
const cell = (value, cls) => el("td", { class: cls }, value === null || value === undefined ? "–" : value);

function crumbs(...parts) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren(...parts.map((p) => (p.href ? el("a", { href: p.href }, p.text) : el("span", {}, p.text))));
}

function showError(error) {
  const hint = error.status === 401 ? "Sign in: reload the page and enter a user known to the server."
    : error.status === 403 ? "Your user is not allowed to see this (ACLs)." : "";
  app.replaceChildren(el("section", {}, el("p", { class: "error" }, error.message), hint ? el("p", { class: "muted" }, hint) : null));
}

// ------------------------------------------------------------------ groups list
async function showGroups() {
  crumbs({ text: "Groups" });
  const { groups } = await api("/api/groups");
  const rows = groups.map((g) => el("tr", { "data-group": g.group_id },
    el("td", {}, el("a", { href: groupLink(g.group_id), class: "group-id" }, g.group_id)),
    el("td", {}, state(g.state)),
    cell(g.type),
    cell(g.protocol || null),
    cell(g.members, "num")));
  app.replaceChildren(
    el("h1", {}, "Consumer groups"),
    el("section", {}, table([["Group"], ["State"], ["Type"], ["Assignor"], ["Members", "num"]], rows,
                            "No groups yet.")));
}

// ------------------------------------------------------------------ one group
async function showGroup(groupId) {
  crumbs({ text: "Groups", href: "#/" }, { text: groupId });
  const group = await api(groupPath(groupId));
  const coordinator = group.coordinator ? `${group.coordinator.node_id} (${group.coordinator.host}:${group.coordinator.port})` : "–";
  const members = group.members.map((m) => el("tr", {},
    cell(m.member_id), cell(m.group_instance_id), cell(m.client_id), cell(m.host),
    cell(m.assignment.map((a) => `${a.topic}-${a.partition}`).join(", ") || null)));
  const offsetRows = group.offsets.map((o) => el("tr", { "data-partition": `${o.topic}:${o.partition}` },
    el("td", {}, el("input", { type: "checkbox", class: "pick", "data-topic": o.topic, "data-partition": o.partition,
                               "aria-label": `select ${o.topic}-${o.partition}`, disabled: o.offset === null })),
    cell(o.topic), cell(o.partition, "num"), el("td", { class: "num committed" }, o.offset === null ? "–" : String(o.offset)),
    cell(o.log_end_offset, "num"), cell(o.lag, "num"), cell(o.member_id), cell(o.metadata || null)));
  const deleteButton = el("button", { id: "delete-offsets", onclick: () => confirmDeleteOffsets(group) }, "Delete selected offsets…");
  app.replaceChildren(
    el("h1", {}, group.group_id),
    el("div", { class: "facts" },
      el("div", {}, el("span", {}, "State"), state(group.state)),
      el("div", {}, el("span", {}, "Protocol"), `${group.protocol_type || "–"} / ${group.protocol || "–"}`),
      el("div", {}, el("span", {}, "Coordinator"), coordinator),
      el("div", {}, el("span", {}, "Members"), String(group.members.length))),
    el("section", {}, el("h2", {}, "Members and assignments"),
      table([["Member"], ["Instance"], ["Client"], ["Host"], ["Assignment"]], members, "No active members.")),
    el("section", { id: "offsets" }, el("h2", {}, "Committed offsets"),
      table([[""], ["Topic"], ["Partition", "num"], ["Offset", "num"], ["Log end", "num"], ["Lag", "num"], ["Owner"], ["Metadata"]],
            offsetRows, "No committed offsets."),
      group.offsets.length ? el("div", { class: "actions" }, deleteButton) : null));
}

// ------------------------------------------------------------------ confirmation dialog
function confirmDialog(title, body, okText, action) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-body").replaceChildren(body);
  document.getElementById("confirm-error").textContent = "";
  const ok = document.getElementById("confirm-ok");
  ok.textContent = okText;
  ok.disabled = false;
  ok.onclick = async (event) => {
    event.preventDefault();
    ok.disabled = true;
    try {
      await action();
      dialog.close("done");
      route();
    } catch (error) {
      document.getElementById("confirm-error").textContent = error.message;
      ok.disabled = false;
    }
  };
  dialog.showModal();
}

function confirmDeleteOffsets(group) {
  const picked = [...document.querySelectorAll("input.pick:checked")].map((box) => ({
    topic: box.dataset.topic, partition: Number(box.dataset.partition) }));
  if (!picked.length) { statusLine.textContent = "Select the partitions whose offsets to delete."; return; }
  const current = new Map(group.offsets.map((o) => [`${o.topic}:${o.partition}`, o.offset]));
  const rows = picked.map((p) => el("tr", {}, cell(p.topic), cell(p.partition, "num"), cell(current.get(`${p.topic}:${p.partition}`), "num"), cell("deleted")));
  confirmDialog(`Delete committed offsets of ${group.group_id}?`,
    el("div", {}, el("p", {}, "The group will start these partitions from its auto.offset.reset position."),
       table([["Topic"], ["Partition", "num"], ["Now", "num"], ["After"]], rows, "")),
    "Delete offsets",
    () => post(`${groupPath(group.group_id)}/delete-offsets`, { partitions: picked, confirm: group.group_id }));
}

// ------------------------------------------------------------------ routing
async function route() {
  const hash = location.hash || "#/";
  statusLine.textContent = "";
  try {
    if (hash.startsWith("#/group/")) await showGroup(decodeURIComponent(hash.slice("#/group/".length)));
    else await showGroups();
    statusLine.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    showError(error);
  }
}

window.addEventListener("hashchange", route);
route();
