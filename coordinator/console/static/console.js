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

// No answer at all (the console's server is down or the network is), or the console answering that it
// cannot reach the coordinator: the page's data can no longer be refreshed, and says so.
class Unreachable extends Error {}

async function api(path, options) {
  let response;
  try {
    response = await fetch(path, Object.assign({ headers: { "Accept": "application/json" } }, options || {}));
  } catch (error) {
    throw new Unreachable(`no answer from the console (${error.message})`);
  }
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (response.status === 503 && body && body.error === "COORDINATOR_UNREACHABLE") throw new Unreachable(body.message);
  if (!response.ok) throw new ApiError(response.status, body);
  reachable();
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
// A table scrolls sideways inside its own box on a narrow screen; the page itself never does.
const scroller = (tableNode) => el("div", { class: "table-wrap" }, tableNode);
const table = (headers, rows, empty) => rows.length
  ? scroller(el("table", {}, el("thead", {}, el("tr", {}, headers.map(([text, cls]) => el("th", { class: cls }, text)))),
       el("tbody", {}, rows)))
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

// ------------------------------------------------------------------ connection state
// When the server stops answering, every page says so at once ("server unreachable since …"), keeps what it
// showed but marks it stale, and tries again by itself: after 1 s, then twice as long each time up to 30 s,
// whatever the page's refresh choice. The first answer clears the banner and the page refreshes.
const connection = { lostMs: null, lastOkMs: null, retryMs: 0, why: "" };
const banner = document.getElementById("connection");
const RETRY_FIRST_MS = 1000, RETRY_MAX_MS = 30000;

function reachable() {
  connection.lastOkMs = Date.now();
  if (connection.lostMs === null) return;
  connection.lostMs = null;
  connection.retryMs = 0;
  banner.hidden = true;
  banner.replaceChildren();
  app.classList.remove("stale");
}

function unreachable(error) {
  if (connection.lostMs === null) connection.lostMs = Date.now();
  connection.retryMs = connection.retryMs ? Math.min(RETRY_MAX_MS, connection.retryMs * 2) : RETRY_FIRST_MS;
  connection.why = error.message;
  app.classList.add("stale");
  const clock = (ms) => new Date(ms).toLocaleTimeString();
  banner.replaceChildren(
    el("strong", {}, `Server unreachable since ${clock(connection.lostMs)}.`), " ",
    connection.lastOkMs ? `The data below is from ${clock(connection.lastOkMs)} and may be stale. ` : "No data yet. ",
    el("span", { id: "retry-in" }, `Trying again in ${connection.retryMs / 1000} s`), ` (${connection.why}) `,
    el("button", { id: "retry-now", onclick: () => runRefresh() }, "Try now"));
  banner.hidden = false;
  statusLine.textContent = "stale";
}

// ------------------------------------------------------------------ refresh
// Pages refresh themselves on a timer while the tab is visible; a hidden tab asks the server nothing
// (Page Visibility API) and catches up as soon as it is shown again.
const REFRESH_CHOICES = [0, 2000, 5000, 10000, 30000];  // 0: only when asked
const refresh = { timer: null, everyMs: 5000, run: null, lastMs: 0 };
// Each kind of page remembers its own choice; a group page refreshes only when asked unless told otherwise.
const refreshEvery = { groups: 5000, group: 0, topics: 10000, topic: 10000, cluster: 5000 };

function scheduleRefresh() {
  clearTimeout(refresh.timer);
  refresh.timer = null;
  if (!refresh.run || document.hidden) return;
  if (connection.lostMs !== null) {  // unreachable: try again with backoff, even on a page refreshed by hand
    refresh.timer = setTimeout(runRefresh, connection.retryMs);
    return;
  }
  if (!refresh.everyMs) return;
  refresh.timer = setTimeout(runRefresh, Math.max(0, refresh.lastMs + refresh.everyMs - Date.now()));
}

// Runs the page's refresh; never throws, and always schedules the next one (a failed refresh is shown,
// never the end of refreshing).
async function runRefresh() {
  const run = refresh.run;
  if (!run || document.hidden || document.getElementById("confirm").open) { scheduleRefresh(); return; }
  clearTimeout(refresh.timer);
  try {
    await keepingFocus(run);
    if (refresh.run === run) statusLine.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    if (error instanceof Unreachable) unreachable(error);
    else {
      if (!(error instanceof ApiError)) console.error(error);
      statusLine.textContent = error.message;
    }
  }
  refresh.lastMs = Date.now();
  if (refresh.run === run) scheduleRefresh();
}

document.addEventListener("visibilitychange", () => {
  if (document.hidden) { clearTimeout(refresh.timer); refresh.timer = null; statusLine.textContent = "paused (tab hidden)"; }
  else if (refresh.run && (connection.lostMs !== null || (refresh.everyMs && Date.now() - refresh.lastMs >= refresh.everyMs))) runRefresh();
  else scheduleRefresh();
});

// Redrawing a page's data keeps the keyboard where it was: the element that had focus is found again in the
// new content by what identifies it (id, sort key, link, label) and focused.
function focusKey(node) {
  if (!node || node === document.body || !app.contains(node)) return null;
  for (const name of ["id", "data-sort", "aria-label", "href", "data-key"]) {
    const value = node.getAttribute(name);
    if (value) return [node.tagName, name, value];
  }
  return null;
}

async function keepingFocus(run) {
  const key = focusKey(document.activeElement);
  await run();
  if (!key || (document.activeElement && document.activeElement !== document.body)) return;
  const again = [...app.querySelectorAll(`${key[0]}[${key[1]}]`)].find((n) => n.getAttribute(key[1]) === key[2]);
  if (again) again.focus();
}

// The page's refresh control: a "Refresh" button and how often to refresh on its own.
function refreshControl(kind) {
  const choice = el("select", { id: "refresh-every", "aria-label": "refresh every",
    onchange: () => { refresh.everyMs = refreshEvery[kind] = Number(choice.value); scheduleRefresh(); hint(); } },
    REFRESH_CHOICES.map((ms) => el("option", { value: ms, selected: ms === refreshEvery[kind] },
                                   ms ? `every ${ms / 1000} s` : "manually")));
  const note = el("span", { class: "muted", id: "refresh-note" });
  const hint = () => { note.textContent = refreshEvery[kind] ? "" : "This page refreshes only when asked (Refresh), unless you pick an interval."; };
  hint();
  return el("div", { class: "refresh" },
    note,
    el("button", { id: "refresh-now", onclick: () => runRefresh() }, "Refresh"),
    el("label", {}, "Refresh ", choice));
}

// Starts the page's refresh: `run` fetches and redraws the page's data (not its controls).
function refreshWith(run, kind) {
  refresh.run = run;
  refresh.everyMs = refreshEvery[kind];
  refresh.lastMs = Date.now();
  scheduleRefresh();
}

// ------------------------------------------------------------------ the address bar keeps a view
// The group list's search, filters, sort and page, and the topics' search, are in the URL
// (#/?sort=lag&order=desc&state=Empty), so a view can be bookmarked and shared.
function setQueryInUrl(path, values, defaults) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(values)) {
    if (value !== "" && value !== null && value !== undefined && String(value) !== String(defaults[key])) params.set(key, value);
  }
  const text = params.toString();
  history.replaceState(null, "", `${path}${text ? `?${text}` : ""}`);
}

function queryFromHash(target, defaults) {
  const hash = location.hash || "#/";
  const at = hash.indexOf("?");
  const params = new URLSearchParams(at < 0 ? "" : hash.slice(at + 1));
  for (const key of Object.keys(defaults)) {
    const value = params.get(key);
    target[key] = value === null ? defaults[key] : (typeof defaults[key] === "number" ? Math.max(0, Number(value) || 0) : value);
  }
}

// ------------------------------------------------------------------ groups list
const LIST_DEFAULTS = { search: "", state: "", type: "", health: "", sort: "group_id", order: "asc", offset: 0 };
const listQuery = Object.assign({}, LIST_DEFAULTS);
const LIST_PAGE = 100;
const lagText = (lag) => (lag === null || lag === undefined ? "–" : String(lag));

function sortHeader(label, key, cls) {
  const active = listQuery.sort === key;
  const arrow = active ? (listQuery.order === "asc" ? " ▲" : " ▼") : "";
  return el("th", { class: cls },
    el("a", { href: "#/", class: `sort${active ? " active" : ""}`, "data-sort": key, onclick: (event) => {
      event.preventDefault();
      listQuery.order = active && listQuery.order === "asc" ? "desc" : (active ? "asc" : (key === "lag" || key === "members" ? "desc" : "asc"));
      listQuery.sort = key;
      listQuery.offset = 0;
      runRefresh();
    } }, label + arrow));
}

async function loadGroupsPage(seq) {
  setQueryInUrl("#/", listQuery, LIST_DEFAULTS);
  const params = new URLSearchParams({ sort: listQuery.sort, order: listQuery.order, offset: listQuery.offset, limit: LIST_PAGE });
  for (const key of ["search", "state", "type", "health"]) if (listQuery[key]) params.set(key, listQuery[key]);
  const page = await api(`/api/groups?${params}`);
  if (seq !== routeSeq) return;
  const rows = page.groups.map((g) => el("tr", { "data-group": g.group_id },
    el("td", {}, el("a", { href: groupLink(g.group_id), class: "group-id" }, g.group_id)),
    el("td", {}, state(g.state)),
    cell(g.type),
    cell(g.protocol || null),
    cell(g.members, "num"),
    el("td", { class: "num lag" }, lagText(g.lag)),
    el("td", {}, g.health ? el("span", { class: `state health-${g.health}` }, g.health) : "–")));
  const head = el("thead", {}, el("tr", {}, sortHeader("Group", "group_id"), sortHeader("State", "state"),
    sortHeader("Type", "type"), el("th", {}, "Assignor"), sortHeader("Members", "members", "num"),
    sortHeader("Lag", "lag", "num"), sortHeader("Health", "health")));
  const last = Math.min(page.offset + page.groups.length, page.total);
  const pager = el("div", { class: "pager" },
    el("button", { id: "page-prev", disabled: page.offset === 0,
      onclick: () => { listQuery.offset = Math.max(0, listQuery.offset - LIST_PAGE); runRefresh(); } }, "‹ Previous"),
    el("span", { id: "page-info" }, page.total ? `${page.offset + 1}–${last} of ${page.total}` : "0 of 0",
       page.total !== page.groups_known ? ` (of ${page.groups_known} groups)` : ""),
    el("button", { id: "page-next", disabled: last >= page.total,
      onclick: () => { listQuery.offset += LIST_PAGE; runRefresh(); } }, "Next ›"));
  const unreachable = page.unreachable.length
    ? el("p", { class: "error" }, `Not answering: ${page.unreachable.map((u) => `node ${u.node_id}`).join(", ")}`) : null;
  document.getElementById("group-list").replaceChildren(...[unreachable,
    rows.length ? scroller(el("table", {}, head, el("tbody", {}, rows)))
      : el("p", { class: "muted" }, page.groups_known ? "No group matches." : "No groups yet."), pager].filter(Boolean));
}

const HEALTH_STATUSES = ["OK", "WARN", "ERR"];  // a group's status by Burrow's rules

function filterSelect(id, label, key, options) {
  const select = el("select", { id, "aria-label": label, onchange: () => {
    listQuery[key] = select.value; listQuery.offset = 0; runRefresh(); } },
    el("option", { value: "" }, `any ${label}`),
    options.map((o) => el("option", { value: o, selected: listQuery[key] === o }, o)));
  return select;
}

async function showGroups(seq) {
  crumbs();
  queryFromHash(listQuery, LIST_DEFAULTS);
  let typing = null;
  const search = el("input", { type: "search", id: "group-search", placeholder: "Search group ids", value: listQuery.search,
    oninput: () => {
      clearTimeout(typing);
      typing = setTimeout(() => { listQuery.search = search.value.trim(); listQuery.offset = 0; runRefresh(); }, 250);
    } });
  const controls = el("div", { class: "actions" }, search,
    filterSelect("filter-state", "state", "state", ["Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Assigning", "Reconciling"]),
    filterSelect("filter-type", "type", "type", ["classic", "consumer"]),
    filterSelect("filter-health", "health", "health", HEALTH_STATUSES),
    refreshControl("groups"));
  app.replaceChildren(el("h1", {}, "Consumer groups"), el("section", {}, controls, el("div", { id: "group-list" })));
  search.value = listQuery.search;
  await loadGroupsPage(seq);
  refreshWith(() => loadGroupsPage(seq), "groups");
}

// ------------------------------------------------------------------ topics
const topicLink = (name) => `#/topic/${encodeURIComponent(name)}`;
const TOPICS_DEFAULTS = { search: "" };
const topicsQuery = Object.assign({}, TOPICS_DEFAULTS);

async function loadTopics(seq) {
  const topicSearch = topicsQuery.search;
  setQueryInUrl("#/topics", topicsQuery, TOPICS_DEFAULTS);
  const params = new URLSearchParams({ limit: 500 });
  if (topicSearch) params.set("search", topicSearch);
  const page = await api(`/api/topics?${params}`);
  if (seq !== routeSeq) return;
  const rows = page.topics.map((t) => el("tr", { "data-topic": t.topic },
    el("td", {}, el("a", { href: topicLink(t.topic), class: "topic-name" }, t.topic)),
    cell(t.partitions, "num"), cell(t.groups, "num"), el("td", { class: "num lag" }, lagText(t.lag))));
  document.getElementById("topic-list").replaceChildren(...[
    table([["Topic"], ["Partitions", "num"], ["Groups", "num"], ["Lag", "num"]], rows, "No topics."),
    page.total > page.topics.length ? el("p", { class: "muted" }, `${page.topics.length} of ${page.total} shown; search to narrow.`) : null].filter(Boolean));
}

async function showTopics(seq) {
  crumbs();
  queryFromHash(topicsQuery, TOPICS_DEFAULTS);
  let typing = null;
  const search = el("input", { type: "search", id: "topic-search", placeholder: "Search topics", value: topicsQuery.search,
    oninput: () => { clearTimeout(typing); typing = setTimeout(() => { topicsQuery.search = search.value.trim(); runRefresh(); }, 250); } });
  app.replaceChildren(el("h1", {}, "Topics"),
    el("section", {}, el("div", { class: "actions" }, search, refreshControl("topics")), el("div", { id: "topic-list" })));
  await loadTopics(seq);
  refreshWith(() => loadTopics(seq), "topics");
}

async function loadTopic(name, seq) {
  const topic = await api(`/api/topics/${encodeURIComponent(name)}`);
  if (seq !== routeSeq) return;
  const partitions = topic.partitions.map((p) => el("tr", { "data-partition": p.partition },
    cell(p.partition, "num"), el("td", { class: "num end-offset" }, lagText(p.log_end_offset))));
  const consumers = topic.groups.map((g) => el("tr", { "data-group": g.group_id },
    el("td", {}, el("a", { href: groupLink(g.group_id), class: "group-id" }, g.group_id)),
    el("td", {}, state(g.state)), cell(g.members, "num"), cell(g.partitions, "num"), el("td", { class: "num lag" }, lagText(g.lag))));
  document.getElementById("topic-detail").replaceChildren(
    el("div", { class: "facts" },
      el("div", {}, el("span", {}, "Partitions"), String(topic.partition_count)),
      el("div", {}, el("span", {}, "Topic id"), topic.topic_id || "–"),
      el("div", {}, el("span", {}, "Consumer groups"), String(topic.groups.length))),
    el("section", { id: "consumers" }, el("h2", {}, "Consumer groups"),
      table([["Group"], ["State"], ["Members", "num"], ["Partitions committed", "num"], ["Lag", "num"]], consumers,
            "No group has committed offsets on this topic.")),
    el("section", { id: "partitions" }, el("h2", {}, "Partitions"),
      table([["Partition", "num"], ["Log end offset", "num"]], partitions, "No partitions."),
      topic.partition_count > topic.partitions.length ? el("p", { class: "muted" }, `The first ${topic.partitions.length} of ${topic.partition_count} partitions.`) : null));
}

async function showTopic(name, seq) {
  crumbs({ text: "Topics", href: "#/topics" }, { text: name });
  app.replaceChildren(el("h1", {}, name), el("div", { class: "actions" }, refreshControl("topic")), el("div", { id: "topic-detail" }));
  await loadTopic(name, seq);
  refreshWith(() => loadTopic(name, seq), "topic");
}

// ------------------------------------------------------------------ cluster
function ranges(numbers) {  // [0,1,2,5,7,8] -> "0–2, 5, 7–8"
  const out = [];
  for (let i = 0; i < numbers.length; i++) {
    let j = i;
    while (j + 1 < numbers.length && numbers[j + 1] === numbers[j] + 1) j++;
    out.push(i === j ? String(numbers[i]) : `${numbers[i]}–${numbers[j]}`);
    i = j;
  }
  return out.join(", ") || "–";
}

async function loadCluster(seq) {
  const cluster = await api("/api/cluster");
  if (seq !== routeSeq) return;
  const brokers = cluster.brokers.map((b) => el("tr", { "data-node": b.node_id, class: "broker" },
    cell(b.node_id, "num"), cell(`${b.host}:${b.port}`), cell(b.controller ? "controller" : null),
    cell(b.reachable ? "answering" : "not answering"),
    cell(b.partitions.loaded.length, "num"), cell(ranges(b.partitions.loaded)),
    cell(b.partitions.loading.length ? ranges(b.partitions.loading) : null),
    cell(b.partitions.failed.length ? ranges(b.partitions.failed) : null)));
  const parts = [el("section", { id: "brokers" }, el("h2", {}, "Nodes"),
    table([["Node", "num"], ["Address"], ["Role"], ["Console's view"], ["Partitions", "num"], ["Loaded"], ["Loading"], ["Failed"]],
          brokers, "No nodes."))];
  const etcd = cluster.etcd;
  if (etcd && etcd.error) parts.push(el("section", { id: "etcd" }, el("h2", {}, "etcd"), el("p", { class: "error" }, etcd.error)));
  else if (etcd) {
    const members = (etcd.members || []).map((m) => el("tr", { class: "member" },
      cell(m.endpoint), el("td", {}, el("span", { class: `state health-${m.health === "ok" ? "OK" : "STALLED"}` }, m.health)),
      cell(m.leader ? "leader" : ""), cell(m.db_size === null ? null : `${(m.db_size / 1048576).toFixed(1)} MiB`, "num"),
      cell(m.alarms && m.alarms.length ? m.alarms.join(", ") : null)));
    const section = [el("h2", {}, etcd.revision ? `etcd (revision ${etcd.revision})` : "etcd"),
      table([["Member"], ["Health"], ["Role"], ["Database", "num"], ["Alarms"]], members, "No member answers.")];
    if (etcd.alarms && etcd.alarms.length) section.push(el("p", { class: "error" }, `Alarm: ${etcd.alarms.join(", ")} (see cohort cluster status)`));
    if (etcd.quorum === false) section.push(el("p", { class: "error" }, `No quorum: ${etcd.quorum_detail}`));
    else {
      // A node whose lease lapsed is shown by its state (cut-off: it still takes connections; gone), not as a lease
      const leases = (etcd.nodes || []).map((n) => el("tr", { "data-node": n.node_id, class: n.state === "live" ? "lease" : "lapsed" },
        cell(n.node_id, "num"), cell(n.address), cell(n.state),
        cell(n.lease_ttl_s === null ? null : `${Number(n.lease_ttl_s).toFixed(n.lease_ttl_exact ? 2 : 0)} s`, "num")));
      const owners = (etcd.partitions || []).map((p) => el("tr", { "data-partition": p.partition },
        cell(p.partition, "num"), cell(p.owner, "num"), cell(p.epoch, "num"), el("td", {}, p.load ? el("span", { class: `state load-${p.load}` }, p.load) : "–"),
        cell(p.groups, "num"), cell(p.offsets, "num")));
      section.push(table([["Node", "num"], ["Address"], ["State"], ["Lease left", "num"]], leases, "No node holds a lease."),
        el("h2", {}, "Offsets partitions"),
        table([["Partition", "num"], ["Owner", "num"], ["Epoch", "num"], ["Load"], ["Groups", "num"], ["Offsets", "num"]], owners, ""));
    }
    parts.push(el("section", { id: "etcd" }, ...section));
  } else {
    const owners = cluster.partitions.map((p) => el("tr", { "data-partition": p.partition },
      cell(p.partition, "num"), cell(p.owner, "num"), el("td", {}, el("span", { class: `state load-${p.load}` }, p.load))));
    parts.push(el("section", { id: "partition-owners" }, el("h2", {}, "Offsets partitions"),
      table([["Partition", "num"], ["Owner", "num"], ["Load"]], owners, "")));
  }
  document.getElementById("cluster-detail").replaceChildren(...parts);
}

async function showCluster(seq) {
  crumbs();
  app.replaceChildren(el("h1", {}, "Cluster"), el("div", { class: "actions" }, refreshControl("cluster")), el("div", { id: "cluster-detail" }));
  await loadCluster(seq);
  refreshWith(() => loadCluster(seq), "cluster");
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

let shownGroup = null;  // the group page's latest answer, which its actions act on

async function showGroup(groupId, seq) {
  crumbs({ text: "Groups", href: "#/" }, { text: groupId });
  shownGroup = null;
  app.replaceChildren(el("h1", {}, groupId), el("div", { class: "actions" }, refreshControl("group")),
    el("div", { id: "group-detail" }), groupActions(groupId));
  await loadGroup(groupId, seq);
  refreshWith(() => loadGroup(groupId, seq), "group");
}

async function loadGroup(groupId, seq) {
  const base = groupPath(groupId);
  const [group, health, history, rebalances, lag] = await Promise.all([
    api(base),
    api(`${base}/health`).catch((e) => e),
    api(`${base}/history`).catch((e) => e),
    api(`${base}/rebalances`).catch((e) => e),
    api(`${base}/lag`).catch((e) => e)]);
  if (seq !== routeSeq) return;
  shownGroup = group;
  const picked = new Set([...document.querySelectorAll("input.pick:checked")].map((b) => `${b.dataset.topic}:${b.dataset.partition}`));
  const coordinator = group.coordinator ? `${group.coordinator.node_id} (${group.coordinator.host}:${group.coordinator.port})` : "–";
  const members = group.members.map((m) => el("tr", {},
    cell(m.member_id), cell(m.group_instance_id), cell(m.client_id), cell(m.host),
    cell(m.assignment.map((a) => `${a.topic}-${a.partition}`).join(", ") || null)));
  const offsetRows = group.offsets.map((o) => el("tr", { "data-partition": `${o.topic}:${o.partition}` },
    el("td", {}, el("input", { type: "checkbox", class: "pick", "data-topic": o.topic, "data-partition": o.partition,
                               "aria-label": `select ${o.topic}-${o.partition}`, disabled: o.offset === null,
                               checked: picked.has(`${o.topic}:${o.partition}`) })),
    el("td", {}, el("a", { href: topicLink(o.topic) }, o.topic)), cell(o.partition, "num"),
    el("td", { class: "num committed" }, o.offset === null ? "–" : String(o.offset)),
    cell(o.log_end_offset, "num"), el("td", { class: "num lag" }, lagText(o.lag)), cell(o.member_id), cell(o.metadata || null)));
  const deleteButton = el("button", { id: "delete-offsets", onclick: () => confirmDeleteOffsets(group) }, "Delete selected offsets…");
  document.getElementById("group-detail").replaceChildren(
    el("div", { class: "facts" },
      el("div", {}, el("span", {}, "State"), state(group.state)),
      el("div", {}, el("span", {}, "Protocol"), `${group.protocol_type || "–"} / ${group.protocol || "–"}`),
      el("div", {}, el("span", {}, "Coordinator"), coordinator),
      el("div", {}, el("span", {}, "Members"), String(group.members.length)),
      el("div", {}, el("span", {}, "Total lag"), el("b", { id: "group-lag" }, lagText(group.lag)))),
    el("section", {}, el("h2", {}, "Members and assignments"),
      table([["Member"], ["Instance"], ["Client"], ["Host"], ["Assignment"]], members, "No active members.")),
    el("section", { id: "offsets" }, el("h2", {}, "Committed offsets"),
      table([[""], ["Topic"], ["Partition", "num"], ["Offset", "num"], ["Log end", "num"], ["Lag", "num"], ["Owner"], ["Metadata"]],
            offsetRows, "No committed offsets."),
      group.offsets.length ? el("div", { class: "actions" }, deleteButton) : null),
    await section("lag", "Lag over time", async () => lagChart(unwrap(lag))),
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
  const partitions = health.partitions.map((p) => el("tr", { "data-partition": `${p.topic}:${p.partition}` },
    cell(p.topic), cell(p.partition, "num"), el("td", {}, el("span", { class: `state health-${p.status}` }, p.status)),
    cell(p.offset, "num"), cell(p.lag, "num"), cell(`${p.window_commits}/${health.window_commits}`, "num"),
    cell(when(p.last_moved_ms)), cell(when(p.last_commit_ms))));
  const members = health.members.map((m) => el("tr", {},
    cell(m.member_id), cell(m.client_id), cell(m.client_host), cell(ago(m.heartbeat_age_ms), "num"), cell(ago(m.commit_age_ms), "num")));
  return el("div", {},
    el("p", {}, "Group: ", el("span", { class: `state health-${health.status}`, id: "group-health" }, health.status),
       el("span", { class: "muted" }, ` (Burrow's rules over each partition's last ${health.window_commits} commits, ` +
          `at least ${health.min_distance_ms / 1000} s apart: WARN when the lag never goes down while the group commits; ` +
          "STALL, STOP and REWIND partitions make the group ERR)")),
    table([["Topic"], ["Partition", "num"], ["Status"], ["Offset", "num"], ["Lag", "num"], ["Window", "num"], ["Last moved"], ["Last commit"]],
          partitions, "No partitions."),
    members.length ? table([["Member"], ["Client"], ["Host"], ["Since heartbeat", "num"], ["Since commit", "num"]], members, "") : null);
}

const NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

// The group's total lag as its coordinator sampled it (every few seconds, the last hour), and now.
function lagChart(report) {
  const points = report.samples.filter(([, lag]) => lag !== null).map(([ms, lag]) => ({ ms, lag }));
  if (report.total_lag !== null) points.push({ ms: report.now_ms, lag: report.total_lag });
  if (points.length < 2) {
    return el("p", { class: "muted" }, report.total_lag === null ? "Lag unknown: no source reported an end offset for its partitions (cohort topics end-offsets set)."
      : `Lag now: ${report.total_lag}. The coordinator samples it every few seconds; the chart fills in as it does.`);
  }
  const width = 1100, height = 160, left = 70, right = 20, top = 10, bottom = 30;
  const t0 = points[0].ms, t1 = Math.max(points[points.length - 1].ms, t0 + 1);
  const l1 = Math.max(...points.map((p) => p.lag), 1);
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - right);
  const y = (l) => top + (1 - l / l1) * (height - top - bottom);
  const path = points.map((p, i) => `${i ? "L" : "M"}${x(p.ms).toFixed(1)},${y(p.lag).toFixed(1)}`).join("");
  return el("div", {}, svg("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": "total lag over time", id: "lag-chart" },
    svg("line", { x1: left, y1: height - bottom, x2: width - right, y2: height - bottom, class: "axis" }),
    svg("line", { x1: left, y1: top, x2: left, y2: height - bottom, class: "axis" }),
    svg("text", { x: left - 6, y: y(l1) + 4, "text-anchor": "end" }, l1),
    svg("text", { x: left - 6, y: y(0) + 4, "text-anchor": "end" }, 0),
    svg("text", { x: left, y: height - 8 }, when(t0)),
    svg("text", { x: width - right, y: height - 8, "text-anchor": "end" }, when(t1)),
    svg("path", { d: path, fill: "none", stroke: "#2f6fdd", "stroke-width": 2, class: "lag-series" })),
    el("p", { class: "muted" }, `Lag now: ${lagText(report.total_lag)} (${points.length} samples).`));
}

// Offsets over time, one step line per partition, drawn as inline SVG.
const MAX_MARKS_PER_SERIES = 200;
const COLORS = ["#2f6fdd", "#c0392b", "#1e8449", "#b9770e", "#7d3c98", "#117a65", "#a04000", "#2e4053"];
function historyChart(events) {
  const commits = events.filter((e) => e.offset !== null && e.offset !== undefined);
  if (!commits.length) return el("p", { class: "muted" }, "No commits in the history.");
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
    svg("line", { x1: left, y1: height - bottom, x2: width - right, y2: height - bottom, class: "axis" }),
    svg("line", { x1: left, y1: top, x2: left, y2: height - bottom, class: "axis" }),
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
  if (!value || Number.isNaN(atMs)) { notice("error", "Pick a date and time first."); return; }
  let plan;
  try {
    plan = await api(`${groupPath(group.group_id)}/reset-plan?at_ms=${atMs}`);
  } catch (error) {
    notice("error", `Preview refused: ${error.message}`);
    return;
  }
  const rows = plan.partitions.map((p) => el("tr", { "data-partition": `${p.topic}:${p.partition}` },
    cell(p.topic), cell(p.partition, "num"), cell(p.current, "num"),
    el("td", { class: "num planned" }, p.planned === null ? "no offset (deleted)" : String(p.planned))));
  confirmDialog(`Reset ${group.group_id} to its commits of ${when(plan.at_ms)}?`,
    el("div", {}, plan.warnings.map((text) => el("p", { class: "muted warning" }, text)),
       table([["Topic"], ["Partition", "num"], ["Now", "num"], ["After", "num"]], rows, "Nothing to change.")),
    "Reset offsets",
    () => post(`${groupPath(group.group_id)}/reset-offsets`, { at_ms: plan.at_ms, confirm: group.group_id }),
    { refused: ["Empty", "Dead"].includes(group.state) ? null : { error: "NON_EMPTY_GROUP", message:
        `Assignments can only be reset if the group '${group.group_id}' is inactive, but the current state is ${group.state}.` },
      failed: (answer) => (answer.executed ? null : answer.reason),
      done: (answer) => `Reset ${group.group_id} to its commits of ${when(answer.at_ms)}.` });
}

// ------------------------------------------------------------------ offset management
// Reset (earliest, latest, an offset, a shift, a time, a duration ago; the selected partitions or all) and
// delete the group: each previews old → new per partition from the same planning the CLI's
// `reset-offsets --dry-run` does, and says up front what Kafka would refuse (an active group).
const RESET_CHOICES = [["earliest", "to earliest"], ["latest", "to latest"], ["offset", "to offset"],
  ["shift", "shift by"], ["datetime", "to date and time"], ["duration", "to a duration ago"]];

function pickedPartitions() {
  return [...document.querySelectorAll("input.pick:checked")].map((box) => ({
    topic: box.dataset.topic, partition: Number(box.dataset.partition) }));
}

function groupActions(groupId) {
  const scenario = el("select", { id: "reset-scenario", "aria-label": "reset scenario", onchange: () => shape() },
    RESET_CHOICES.map(([value, text]) => el("option", { value }, text)));
  const value = el("input", { id: "reset-value", "aria-label": "reset value" });
  const valueName = el("span", { id: "reset-value-label" }, "Offset");
  const valueLabel = el("label", {}, valueName, value);
  const scope = el("select", { id: "reset-scope", "aria-label": "partitions to reset" },
    el("option", { value: "all" }, "every partition with an offset"), el("option", { value: "picked" }, "the selected partitions"));
  const shape = () => {
    const kind = scenario.value;
    valueLabel.hidden = kind === "earliest" || kind === "latest";
    valueName.textContent = { offset: "Offset", shift: "Shift (±N)", datetime: "Date and time (local)",
                              duration: "Duration (ISO-8601, e.g. PT1H)" }[kind] || "";
    value.type = kind === "datetime" ? "datetime-local" : "text";
    if (kind === "datetime") value.step = "0.001";
  };
  const reset = el("section", { id: "reset" }, el("h2", {}, "Reset offsets"),
    el("p", { class: "muted" }, "As kafka-consumer-groups.sh --reset-offsets: the group must have no active members; " +
      "new offsets are kept within each partition's earliest and latest offsets. The preview shows every change first."),
    el("div", { class: "actions" }, el("label", {}, "Reset", scenario), valueLabel, el("label", {}, "Partitions", scope),
      el("button", { id: "preview-offsets-reset", onclick: () => previewOffsetsReset(groupId, scenario.value, value.value, scope.value) },
         "Preview reset…")));
  const remove = el("section", { id: "delete-group" }, el("h2", {}, "Delete the group"),
    el("p", { class: "muted" }, "Removes the group and every committed offset it has (Kafka's DeleteGroups): only a group without members."),
    el("button", { id: "preview-delete-group", onclick: () => previewDeleteGroup(groupId) }, "Delete group…"));
  shape();
  return el("div", { id: "group-actions" }, reset, remove);
}

function resetValue(kind, text) {
  if (kind === "earliest" || kind === "latest") return null;
  if (kind === "datetime") {
    const ms = new Date(text).getTime();
    return text && !Number.isNaN(ms) ? ms : undefined;
  }
  return text.trim() === "" ? undefined : text.trim();
}

async function previewOffsetsReset(groupId, kind, text, scope) {
  const value = resetValue(kind, text);
  if (value === undefined) { notice("error", "Give the reset a value first."); return; }
  const partitions = scope === "picked" ? pickedPartitions() : null;
  if (partitions && !partitions.length) { notice("error", "Select the partitions to reset (the boxes in Committed offsets)."); return; }
  const params = new URLSearchParams({ scenario: kind });
  if (value !== null) params.set("value", value);
  if (partitions) params.set("partitions", partitions.map((p) => `${p.topic}:${p.partition}`).join(","));
  let plan;
  try {
    plan = await api(`${groupPath(groupId)}/reset-plan?${params}`);
  } catch (error) {
    notice("error", `Preview refused: ${error.message}`);
    return;
  }
  const rows = plan.partitions.map((p) => el("tr", { "data-partition": `${p.topic}:${p.partition}` },
    cell(p.topic), cell(p.partition, "num"), el("td", { class: "num current" }, p.current === null ? "–" : String(p.current)),
    el("td", { class: "num planned" }, String(p.planned)), cell(`${p.earliest}–${p.latest}`, "num")));
  const label = RESET_CHOICES.find(([k]) => k === kind)[1];
  confirmDialog(`Reset ${groupId} ${label}${value === null ? "" : ` ${kind === "datetime" ? when(value) : value}`}?`,
    el("div", {}, plan.warnings.map((t) => el("p", { class: "muted warning" }, t)),
       table([["Topic"], ["Partition", "num"], ["Now", "num"], ["After", "num"], ["Log range", "num"]], rows, "Nothing to change.")),
    "Reset offsets",
    () => post(`${groupPath(groupId)}/reset-offsets`, { scenario: kind, value, partitions, confirm: groupId }),
    { refused: plan.refused, done: (answer) => `Reset ${answer.partitions.length} partition(s) of ${groupId}: ` +
        answer.partitions.map((p) => `${p.topic}-${p.partition} ${p.current === null ? "–" : p.current} → ${p.planned}`).join(", ") });
}

async function previewDeleteGroup(groupId) {
  let plan;
  try {
    plan = await api(`${groupPath(groupId)}/delete-plan`);
  } catch (error) {
    notice("error", `Preview refused: ${error.message}`);
    return;
  }
  const rows = plan.partitions.map((p) => el("tr", {}, cell(p.topic), cell(p.partition, "num"), cell(p.current, "num"), cell("deleted")));
  confirmDialog(`Delete the group ${groupId}?`,
    el("div", {}, el("p", {}, `State ${plan.state}. The group and these committed offsets are removed:`),
       table([["Topic"], ["Partition", "num"], ["Now", "num"], ["After"]], rows, "No committed offsets.")),
    "Delete group",
    () => post(`${groupPath(groupId)}/delete`, { confirm: groupId }),
    { refused: plan.refused, done: () => `Deleted the group ${groupId}.`, then: () => { location.hash = "#/"; } });
}

// ------------------------------------------------------------------ confirmation dialog
// Every action ends with the server's answer on the page: a refusal known before the click disables the
// button and says why; an error after it keeps the dialog open with the server's words; no answer at all
// says that the outcome is not known and marks the page unreachable; a success closes it and leaves a
// notice saying what the server did.
function notice(kind, text) {
  const box = document.getElementById("notice");
  box.className = kind;
  box.replaceChildren(el("span", { id: "notice-text" }, text), " ",
    el("button", { class: "link", "aria-label": "dismiss", onclick: () => { box.hidden = true; } }, "×"));
  box.hidden = false;
}

function confirmDialog(title, body, okText, action, options) {
  const { refused = null, done = () => "Done.", failed = () => null, then = null } = options || {};
  const dialog = document.getElementById("confirm");
  const problem = document.getElementById("confirm-error");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-body").replaceChildren(body);
  problem.replaceChildren();
  const ok = document.getElementById("confirm-ok");
  ok.textContent = okText;
  ok.disabled = Boolean(refused);
  if (refused) problem.replaceChildren(el("strong", {}, "Kafka would refuse this: "), `${refused.message} (${refused.error})`);
  ok.onclick = async (event) => {
    event.preventDefault();
    ok.disabled = true;
    let answer;
    try {
      answer = await action();
    } catch (error) {
      if (error instanceof Unreachable) {  // no answer: what the server did is not known, and never guessed
        problem.replaceChildren(el("strong", {}, "No answer from the server: "), `${error.message}. Whether it ` +
          "was done is not known; the page shows what the server has once it answers again.");
        unreachable(error);
        scheduleRefresh();
      } else {
        problem.replaceChildren(el("strong", {}, "The server refused: "), error.code ? `${error.message} (${error.code})` : error.message);
      }
      ok.disabled = false;
      return;
    }
    const why = failed(answer);
    if (why) {  // the server answered, and some of it was refused: say so, keep the dialog open
      problem.replaceChildren(el("strong", {}, "The server refused: "), why);
      return;
    }
    dialog.close("done");
    notice("ok", done(answer));
    if (then) then(); else route();
  };
  dialog.showModal();
}

function confirmDeleteOffsets(group) {
  const picked = pickedPartitions();
  if (!picked.length) { notice("error", "Select the partitions whose offsets to delete."); return; }
  const current = new Map(group.offsets.map((o) => [`${o.topic}:${o.partition}`, o.offset]));
  // Kafka refuses to delete the offsets of a topic an active group consumes (GROUP_SUBSCRIBED_TO_TOPIC)
  const consumed = new Set(group.members.flatMap((m) => m.assignment.map((a) => a.topic)));
  const rows = picked.map((p) => el("tr", { "data-partition": `${p.topic}:${p.partition}` }, cell(p.topic), cell(p.partition, "num"),
    cell(current.get(`${p.topic}:${p.partition}`), "num"),
    el("td", { class: "planned" }, consumed.has(p.topic) ? "refused: the group consumes this topic" : "deleted")));
  const refusedTopics = [...new Set(picked.filter((p) => consumed.has(p.topic)).map((p) => p.topic))];
  confirmDialog(`Delete committed offsets of ${group.group_id}?`,
    el("div", {}, el("p", {}, "The group will start these partitions from its auto.offset.reset position."),
       table([["Topic"], ["Partition", "num"], ["Now", "num"], ["After"]], rows, "")),
    "Delete offsets",
    () => post(`${groupPath(group.group_id)}/delete-offsets`, { partitions: picked, confirm: group.group_id }),
    { refused: refusedTopics.length ? { error: "GROUP_SUBSCRIBED_TO_TOPIC", message:
        `the group has active members consuming ${refusedTopics.join(", ")}; stop them first` } : null,
      failed: (answer) => {
        const bad = answer.partitions.filter((p) => p.error !== "NONE");
        return bad.length ? `${bad.length} of ${answer.partitions.length} partition(s) kept their offsets: ` +
          bad.map((p) => `${p.topic}-${p.partition} ${p.error}`).join(", ") : null;
      },
      done: (answer) => `Deleted the committed offsets of ${answer.partitions.map((p) => `${p.topic}-${p.partition}`).join(", ")}.` });
}

// ------------------------------------------------------------------ routing
let routeSeq = 0;

function decoded(text) {
  try { return decodeURIComponent(text); } catch (e) { return null; }
}

async function route() {
  const hash = location.hash || "#/";
  if (!hash.startsWith("#/group/")) shownGroup = null;
  const seq = ++routeSeq;
  refresh.run = null;
  clearTimeout(refresh.timer);
  statusLine.textContent = "";
  const path = hash.split("?")[0];
  for (const link of document.querySelectorAll("#pages a")) {
    link.classList.toggle("active", path.startsWith(link.getAttribute("href")) && (link.getAttribute("href") !== "#/" || !/^#\/(topic|cluster)/.test(path)));
  }
  try {
    if (path.startsWith("#/group/")) {
      const id = decoded(path.slice("#/group/".length));
      if (id === null) throw new ApiError(400, { message: `Not a group link: ${hash}` });
      await showGroup(id, seq);
    } else if (path.startsWith("#/topic/")) {
      const name = decoded(path.slice("#/topic/".length));
      if (name === null) throw new ApiError(400, { message: `Not a topic link: ${hash}` });
      await showTopic(name, seq);
    } else if (path.startsWith("#/topics")) await showTopics(seq);
    else if (path.startsWith("#/cluster")) await showCluster(seq);
    else await showGroups(seq);
    if (seq === routeSeq) statusLine.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    if (seq !== routeSeq) return;
    if (error instanceof Unreachable) unreachable(error);
    else {
      if (!(error instanceof ApiError)) console.error(error);
      showError(error);
    }
    // try again as the page would (with backoff while the server is unreachable)
    refreshWith(() => route(), path.startsWith("#/group/") ? "group" : "groups");
  }
}

window.addEventListener("hashchange", route);
route();
