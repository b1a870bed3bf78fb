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

// A change carries a header no cross-site form can send (the server refuses changes without it).
function post(path, body) {
  return api(path, { method: "POST", body: JSON.stringify(body),
                     headers: { "Content-Type": "application/json", "Accept": "application/json", "X-Cohort-Console": "1" } });
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
async function showGroups(seq) {
  const { groups } = await api("/api/groups");
  if (seq !== routeSeq) return;  // the user went elsewhere meanwhile
  crumbs({ text: "Groups" });
  const rows = groups.map((g) => el("tr", { "data-group": g.group_id },
    el("td", {}, el("a", { href: groupLink(g.group_id), class: "group-id" }, g.group_id)),
    el("td", {}, state(g.state)),
    cell(g.type),
    cell(g.protocol || null),
    cell(g.members, "num"),
    el("td", {}, g.health ? el("span", { class: `state health-${g.health}` }, g.health) : "–")));
  app.replaceChildren(
    el("h1", {}, "Consumer groups"),
    el("section", {}, table([["Group"], ["State"], ["Type"], ["Assignor"], ["Members", "num"], ["Health"]], rows,
                            "No groups yet.")));
}

// ------------------------------------------------------------------ one group
const TIME_FORMAT = { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
                      second: "2-digit", fractionalSecondDigits: 3, hour12: false };
const when = (ms) => (ms === null || ms === undefined ? "–" : new Date(ms).toLocaleString(undefined, TIME_FORMAT));
const ago = (ms) => (ms === null || ms === undefined ? "–" : `${(ms / 1000).toFixed(1)} s`);

// A section that shows its own error (e.g. no offset history in cluster mode) without hiding the rest.
async function section(id, title, load) {
  let content;
  try {
    content = await load();
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    content = el("p", { class: "muted" }, error.message);
  }
  return el("section", { id }, el("h2", {}, title), content);
}

async function showGroup(groupId, seq) {
  const base = groupPath(groupId);
  const [group, health, history, rebalances] = await Promise.all([
    api(base),
    api(`${base}/health`).catch((e) => e),
    api(`${base}/history`).catch((e) => e),
    api(`${base}/rebalances`).catch((e) => e)]);
  if (seq !== routeSeq) return;
  crumbs({ text: "Groups", href: "#/" }, { text: groupId });
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
      group.offsets.length ? el("div", { class: "actions" }, deleteButton) : null),
    await section("health", "Health", async () => healthView(unwrap(health))),
    await section("history", "Commit history", async () => historyChart(unwrap(history).events)),
    await section("undo", "Undo: reset to what was committed at a time", async () => undoView(group, unwrap(history).events)),
    await section("rebalances", "Rebalance timeline", async () => timeline(unwrap(rebalances).entries)));
}

function unwrap(result) {
  if (result instanceof Error) throw result;
  return result;
}

function healthView(health) {
  const partitions = health.partitions.map((p) => el("tr", {},
    cell(p.topic), cell(p.partition, "num"), el("td", {}, el("span", { class: `state health-${p.status}` }, p.status)),
    cell(p.offset, "num"), cell(when(p.last_moved_ms)), cell(when(p.last_commit_ms))));
  const members = health.members.map((m) => el("tr", {},
    cell(m.member_id), cell(m.client_id), cell(m.client_host), cell(ago(m.heartbeat_age_ms), "num"), cell(ago(m.commit_age_ms), "num")));
  return el("div", {},
    el("p", {}, "Group: ", el("span", { class: `state health-${health.status}`, id: "group-health" }, health.status),
       el("span", { class: "muted" }, ` (stalled after ${health.stall_ms / 1000} s without progress)`)),
    table([["Topic"], ["Partition", "num"], ["Status"], ["Offset", "num"], ["Last moved"], ["Last commit"]], partitions, "No partitions."),
    members.length ? table([["Member"], ["Client"], ["Host"], ["Since heartbeat", "num"], ["Since commit", "num"]], members, "") : null);
}

// Offsets over time, one step line per partition, drawn as inline SVG.
const MAX_MARKS_PER_SERIES = 200;
const COLORS = ["#2f6fdd", "#c0392b", "#1e8449", "#b9770e", "#7d3c98", "#117a65", "#a04000", "#2e4053"];
function historyChart(events) {
  const commits = events.filter((e) => e.offset !== null && e.offset !== undefined);
  if (!commits.length) return el("p", { class: "muted" }, "No commits in the history.");
  const NS = "http://www.w3.org/2000/svg";
  const svg = (tag, attrs, ...children) => {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  };
  const width = 1100, height = 240, left = 70, right = 20, top = 10, bottom = 30;
  const t0 = Math.min(...commits.map((e) => e.time_ms)), t1 = Math.max(...commits.map((e) => e.time_ms), t0 + 1);
  const o0 = Math.min(...commits.map((e) => e.offset)), o1 = Math.max(...commits.map((e) => e.offset), o0 + 1);
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - right);
  const y = (o) => top + (1 - (o - o0) / (o1 - o0)) * (height - top - bottom);
  const byPartition = new Map();
  for (const e of commits) {
    const key = `${e.topic}-${e.partition}`;
    if (!byPartition.has(key)) byPartition.set(key, []);
    byPartition.get(key).push(e);
  }
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": "committed offsets over time" },
    svg("line", { x1: left, y1: height - bottom, x2: width - right, y2: height - bottom, stroke: "#dde1ea" }),
    svg("line", { x1: left, y1: top, x2: left, y2: height - bottom, stroke: "#dde1ea" }),
    svg("text", { x: left - 6, y: y(o1) + 4, "text-anchor": "end" }, o1),
    svg("text", { x: left - 6, y: y(o0) + 4, "text-anchor": "end" }, o0),
    svg("text", { x: left, y: height - 8 }, when(t0)),
    svg("text", { x: width - right, y: height - 8, "text-anchor": "end" }, when(t1)));
  const legend = [];
  [...byPartition.entries()].forEach(([key, points], i) => {
    const color = COLORS[i % COLORS.length];
    let path = "";
    points.forEach((p, j) => {
      path += j === 0 ? `M${x(p.time_ms)},${y(p.offset)}` : `H${x(p.time_ms)}V${y(p.offset)}`;
    });
    chart.append(svg("path", { d: path, fill: "none", stroke: color, "stroke-width": 2, class: "series", "data-partition": key }));
    for (const p of points.slice(-MAX_MARKS_PER_SERIES)) {  // the line shows them all; markers only for the latest
      chart.append(svg("circle", { cx: x(p.time_ms), cy: y(p.offset), r: 3, fill: color, class: "commit" },
        svg("title", {}, `${key} @ ${when(p.time_ms)}: ${p.offset} (${p.client_id || "admin"}, generation ${p.generation})`)));
    }
    const swatch = el("span", { class: "legend" }, `■ ${key}`);
    swatch.style.color = color;  // through the CSSOM: the page's CSP refuses style attributes
    legend.push(swatch);
  });
  const rows = commits.slice(-20).reverse().map((e) => el("tr", {},
    cell(when(e.time_ms)), cell(`${e.topic}-${e.partition}`), cell(e.offset, "num"), cell(e.client_id || null),
    cell(e.client_host || null), cell(e.generation, "num")));
  return el("div", {}, chart, el("div", {}, legend),
    el("details", {}, el("summary", {}, `Latest commits (${commits.length} in the history)`),
      table([["Time"], ["Partition"], ["Offset", "num"], ["Client"], ["Host"], ["Generation", "num"]], rows, "")));
}

function timeline(entries) {
  if (!entries.length) return el("p", { class: "muted" }, "No rebalances journaled.");
  return el("ol", { class: "timeline", reversed: true }, entries.slice().reverse().map((e) => {
    const who = e.members.map((m) => `${m.client_id || m.member_id}${m.client_host ? ` @ ${m.client_host}` : ""}${m.role ? ` (${m.role})` : ""}`).join(", ");
    const moved = e.moves_total ? ` · ${e.moves_total} partition(s) moved` : "";
    const epochWord = e.group_type === "consumer" ? "group epoch" : "generation";
    const epochs = e.kind === "admin" ? "admin action" : `${epochWord} ${e.epoch_before} → ${e.epoch_after}`;
    return el("li", { class: "entry", "data-trigger": e.trigger },
      el("strong", {}, when(e.started_ms)), ` · ${epochs} · `, el("span", { class: "trigger" }, e.trigger.replaceAll("_", " ")),
      e.client_reason ? ` (“${e.client_reason}”)` : "", e.principal ? ` by ${e.principal}` : "",
      who ? ` · ${who}` : "", e.duration_ms !== null && e.duration_ms !== undefined ? ` · ${e.duration_ms} ms` : "", moved,
      e.detail ? el("div", { class: "muted" }, e.detail) : null);
  }));
}

// Local time in the datetime-local input, as `cohort groups reset-offsets --to-commit-at` reads it.
function localInputValue(ms) {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 23);
}

function undoView(group, events) {
  const input = el("input", { type: "datetime-local", step: "0.001", id: "reset-at" });
  const commits = events.filter((e) => e.offset !== null && e.offset !== undefined);
  if (commits.length) input.value = localInputValue(commits[commits.length - 1].time_ms);
  const button = el("button", { id: "preview-reset", onclick: () => previewReset(group, input.value) }, "Preview reset…");
  return el("div", {},
    el("p", { class: "muted" }, "Puts every partition back to the offset the group had committed at that moment (the group must have no active members)."),
    el("div", { class: "actions" }, el("label", {}, "Committed at (local time)", input), button));
}

async function previewReset(group, value) {
  const atMs = new Date(value).getTime();
  if (!value || Number.isNaN(atMs)) { statusLine.textContent = "Pick a date and time first."; return; }
  let plan;
  try {
    plan = await api(`${groupPath(group.group_id)}/reset-plan?at_ms=${atMs}`);
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    statusLine.textContent = error.message;
    return;
  }
  const rows = plan.partitions.map((p) => el("tr", { "data-partition": `${p.topic}:${p.partition}` },
    cell(p.topic), cell(p.partition, "num"), cell(p.current, "num"),
    el("td", { class: "num planned" }, p.planned === null ? "no offset (deleted)" : String(p.planned))));
  confirmDialog(`Reset ${group.group_id} to its commits of ${when(plan.at_ms)}?`,
    el("div", {}, plan.warnings.map((text) => el("p", { class: "muted warning" }, text)),
       table([["Topic"], ["Partition", "num"], ["Now", "num"], ["After", "num"]], rows, "Nothing to change.")),
    "Reset offsets",
    async () => {
      const done = await post(`${groupPath(group.group_id)}/reset-offsets`, { at_ms: plan.at_ms, confirm: group.group_id });
      if (!done.executed) throw new Error(done.reason);
    });
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
function groupIdOf(hash) {
  try {
    return decodeURIComponent(hash.slice("#/group/".length));
  } catch (error) {  // a link cut short or mistyped: not a group id at all
    throw new ApiError(400, { message: `Not a group link: ${hash}` });
  }
}

const LIST_REFRESH_MS = 5000;  // the group list follows the groups; a group page changes only when asked
let refreshTimer = null;
let routeSeq = 0;

async function route() {
  const hash = location.hash || "#/";
  const seq = ++routeSeq;
  clearTimeout(refreshTimer);
  statusLine.textContent = "";
  try {
    if (hash.startsWith("#/group/")) await showGroup(groupIdOf(hash), seq);
    else await showGroups(seq);
    statusLine.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    if (seq === routeSeq) showError(error);
  }
  if (seq === routeSeq && !hash.startsWith("#/group/") && !document.getElementById("confirm").open) {
    refreshTimer = setTimeout(route, LIST_REFRESH_MS);
  }
}

window.addEventListener("hashchange", route);
route();
