// crawlfleet dashboard: one page drawn from the manager's API (/session, /api/v1/...),
// kept live by server-sent events (/api/v1/live). Everything that comes from the API,
// crawled pages included, enters the page as text nodes or attribute values (never
// parsed as HTML), and links are made only of http(s) URLs.

const view = document.getElementById("view");
const toastBox = document.getElementById("toast");
const confirmDialog = document.getElementById("confirm");

let me = null; // {name, role, csrf} once signed in
let source = null; // the EventSource of the current page
let page = null; // the current page: {kind, job, update(event, data), tick()}
const series = new Map(); // job -> [[time ms, pages/s]], the charts' points
const SERIES_MAX = 3600;
const ROLES = ["viewer", "operator", "admin"];

// -- DOM helpers ---------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function svg(tag, attrs) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  return el;
}

function fill(el, ...children) {
  el.replaceChildren();
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function can(role) {
  return me !== null && ROLES.indexOf(me.role) >= ROLES.indexOf(role);
}

function toast(message, bad = false) {
  const el = h("div", { class: bad ? "bad" : "" }, message);
  toastBox.append(el);
  setTimeout(() => el.remove(), bad ? 8000 : 4000);
}

function banner(message) {
  // One line over the page while something is wrong (not a toast a second).
  const el = document.getElementById("banner");
  if ((el.textContent || "") !== message) fill(el, message);
  el.hidden = !message;
}

function ask(question) {
  // The page's own confirmation dialog; resolves true when confirmed.
  return new Promise((resolve) => {
    fill(document.getElementById("confirm-text"), question);
    confirmDialog.returnValue = "cancel";
    confirmDialog.addEventListener("close", () => resolve(confirmDialog.returnValue === "ok"), { once: true });
    confirmDialog.showModal();
  });
}

// -- figures as text -------------------------------------------------------------------
const nf = new Intl.NumberFormat("en-US");
function num(value, digits = 0) {
  if (value === null || value === undefined || Number.isNaN(Number(value))) return "–";
  return nf.format(Number(Number(value).toFixed(digits)));
}
function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  let s = Math.max(0, Math.round(seconds));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hr = Math.floor(s / 3600); s -= hr * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${hr}h`;
  if (hr) return `${hr}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}
function bytes(value) {
  if (typeof value !== "number") return "–";
  return value >= 1 << 30 ? `${(value / (1 << 30)).toFixed(1)} GiB` : `${Math.round(value / (1 << 20))} MiB`;
}
function text(value) {
  if (value === null || value === undefined) return "–";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}
function badge(state) {
  const known = /^[a-z_]+$/.test(String(state)) ? String(state) : "";
  return h("span", { class: `badge ${known}` }, text(state));
}
function link(url) {
  const s = String(url);
  return /^https?:\/\//i.test(s) ? h("a", { href: s, rel: "noopener noreferrer", target: "_blank" }, s) : s;
}

// -- the API ---------------------------------------------------------------------------
async function api(method, path, body) {
  const init = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  if (method !== "GET" && me) init.headers["X-CSRF-Token"] = me.csrf;
  const response = await fetch(path, init);
  let data = null;
  try { data = await response.json(); } catch { data = null; }
  if (response.status === 401 && path !== "/session") {
    signedOut("Your session has ended: sign in again.");
  }
  if (!response.ok) {
    const message = data && data.error ? data.error.message : `${response.status} ${response.statusText}`;
    throw new Error(message);
  }
  return data;
}

async function act(what, method, path, body) {
  try {
    const result = await api(method, path, body);
    return result;
  } catch (err) {
    toast(`${what}: ${err.message}`, true);
    return null;
  }
}

// -- live events -----------------------------------------------------------------------
function connect(params) {
  if (source) source.close();
  const query = new URLSearchParams(params).toString();
  source = new EventSource(`/api/v1/live${query ? `?${query}` : ""}`);
  const mine = source;
  const dot = document.getElementById("live-dot");
  source.addEventListener("open", () => dot && dot.classList.add("on"));
  source.addEventListener("error", () => {
    if (dot) dot.classList.remove("on");
    // the browser gives up on a stream answered with an error (a proxy's 502 while the
    // manager restarts, a 401): say so, and start over (sign-in checked) a little later
    if (mine.readyState === EventSource.CLOSED && source === mine) {
      banner("Live updates stopped: the manager does not answer; trying again…");
      setTimeout(() => { if (source === mine) checkSession(); }, 3000);
    }
  });
  for (const name of ["fleet", "job", "nodes", "unavailable", "end"]) {
    source.addEventListener(name, (e) => {
      let data;
      try { data = JSON.parse(e.data); } catch { return; }
      if (name === "fleet") { noteFleet(data); banner(""); }
      if (name === "unavailable") banner(`${data.message}: the figures shown are the last ones received.`);
      if (name === "end" && data.reason !== "max_seconds") { source.close(); checkSession(); return; }
      if (page && page.update) page.update(name, data);
    });
  }
}

function noteFleet(fleet) {
  if (fleet.history) {
    for (const point of fleet.history) {
      for (const [job, rate] of Object.entries(point.jobs)) addPoint(job, point.at, rate);
    }
  }
  const at = Math.max(0, ...fleet.jobs.map((j) => j.now_ms || 0)) || Date.now();
  for (const job of fleet.jobs) addPoint(job.job, at, job.live.pages_per_second);
}

function addPoint(job, at, rate) {
  let points = series.get(job);
  if (!points) { points = []; series.set(job, points); }
  if (points.length && points[points.length - 1][0] >= at) return;
  points.push([at, Number(rate) || 0]);
  if (points.length > SERIES_MAX) points.splice(0, points.length - SERIES_MAX);
}

function fleetSeries() {
  // The sum of every job's rate at each time any job has a point (each job at its
  // latest point not after that time; 0 once a job has had none for 15 s): one pass
  // over the sorted times with a cursor per job.
  const times = [...new Set([...series.values()].flatMap((p) => p.map(([t]) => t)))].sort((a, b) => a - b);
  const jobs = [...series.values()].map((points) => ({ points, at: -1 }));
  return times.slice(-SERIES_MAX).map((t) => {
    let sum = 0;
    for (const job of jobs) {
      while (job.at + 1 < job.points.length && job.points[job.at + 1][0] <= t) job.at += 1;
      if (job.at >= 0 && t - job.points[job.at][0] <= 15000) sum += job.points[job.at][1];
    }
    return [t, sum];
  });
}

// -- a line chart (SVG built node by node) -------------------------------------------
function chart(points, label, width) {
  const W = Math.max(240, Math.round(width || 600)), H = 160, L = 44, B = 20;
  const root = svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label });
  const recent = points.filter(([t]) => t >= (points.length ? points[points.length - 1][0] : 0) - 3600 * 1000);
  const max = Math.max(1, ...recent.map(([, v]) => v));
  root.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W, y2: H - B }));
  root.append(svg("line", { class: "axis", x1: L, y1: 4, x2: L, y2: H - B }));
  const top = svg("text", { x: 2, y: 14 }); top.textContent = num(max, max < 10 ? 1 : 0);
  const zero = svg("text", { x: 2, y: H - B }); zero.textContent = "0";
  const unit = svg("text", { x: L + 6, y: H - 4 }); unit.textContent = label;
  root.append(top, zero, unit);
  if (recent.length > 1) {
    const t0 = recent[0][0], t1 = recent[recent.length - 1][0];
    const span = Math.max(1, t1 - t0);
    const xy = recent.map(([t, v]) => [L + ((t - t0) / span) * (W - L - 4), H - B - (v / max) * (H - B - 8)]);
    const d = xy.map(([x, y], i) => `${i ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`).join("");
    root.append(svg("path", { class: "area", d: `${d}L${xy[xy.length - 1][0].toFixed(1)},${H - B}L${L},${H - B}Z` }));
    root.append(svg("path", { class: "line", d }));
    const span_s = svg("text", { x: W - 80, y: H - 4 }); span_s.textContent = `last ${duration(span / 1000)}`;
    root.append(span_s);
  }
  return root;
}

// -- tables ----------------------------------------------------------------------------
// columns: [[title, row => cell, "num"?], ...]
function table(rows, columns, empty = "Nothing yet.") {
  if (!rows || !rows.length) return h("div", { class: "empty" }, empty);
  return h("div", { class: "table-wrap" }, h("table", {},
    h("thead", {}, h("tr", {}, columns.map(([title, , cls]) => h("th", { class: cls || "" }, title)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell, cls]) => {
      const value = cell(row);
      return h("td", { class: cls || "" }, value instanceof Node ? value : text(value));
    }))))));
}

function card(label, value, id) {
  return h("div", { class: "card" }, h("div", { class: "label" }, label), h("div", { class: "value", "data-figure": id || label }, value));
}

function progressOf(job) {
  const done = (job.counters && job.counters.acked) || 0;
  const total = done + (job.queued || 0) + (job.leased || 0);
  return { done, total, share: total ? done / total : 0 };
}

function progressBar(share, big = false) {
  return h("div", { class: `progress${big ? " progress-big" : ""}`, role: "progressbar", "aria-valuenow": Math.round(share * 100), "aria-valuemin": 0, "aria-valuemax": 100 },
    h("div", { style: null, "data-width": share }));
}

function sizeBars(root) {
  // widths set from script (the CSP allows no inline style attribute in the markup)
  for (const bar of root.querySelectorAll("[data-width]")) bar.style.width = `${(Number(bar.dataset.width) * 100).toFixed(1)}%`;
}

function eta(job) {
  if (job.state === "finished") return "done";
  if (job.eta_seconds === null || job.eta_seconds === undefined) {
    return job.eta_limited_by && job.eta_limited_by !== "unknown" ? `– (${job.eta_limited_by})` : "–";
  }
  return duration(job.eta_seconds) + (job.eta_limited_by ? ` (${job.eta_limited_by})` : "");
}

// -- sign-in ---------------------------------------------------------------------------
function signedOut(message) {
  if (me === null && document.getElementById("login")) return; // already there: keep what is typed
  me = null;
  if (source) { source.close(); source = null; }
  page = null;
  document.getElementById("nav").hidden = true;
  document.getElementById("who").hidden = true;
  const error = h("div", { class: "error-text", id: "login-error" }, message || "");
  const input = h("input", { type: "password", id: "token", name: "token", autocomplete: "current-password", required: true, placeholder: "cft_…" });
  const form = h("form", { class: "panel login", id: "login" },
    h("h1", {}, "Sign in"),
    h("label", { for: "token" }, "API token (crawlfleet manager token create)"),
    input,
    error,
    h("button", { class: "primary", type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      me = await api("POST", "/session", { token: input.value });
      input.value = "";
      start();
    } catch (err) {
      fill(error, err.message);
    }
  });
  fill(view, form);
  input.focus();
}

async function checkSession() {
  let response;
  try {
    response = await fetch("/session", { credentials: "same-origin" });
  } catch {
    // the manager does not answer (restarting?): say so, and look again soon
    banner("The manager does not answer; trying again…");
    setTimeout(checkSession, 3000);
    return;
  }
  if (response.ok) {
    me = await response.json();
    banner("");
    start();
  } else if (response.status === 401) {
    signedOut("");
  } else {
    banner(`The manager answered ${response.status}; trying again…`);
    setTimeout(checkSession, 3000);
  }
}

function start() {
  document.getElementById("nav").hidden = false;
  document.getElementById("who").hidden = false;
  fill(document.getElementById("who-name"), h("span", { id: "live-dot", class: "live-dot", title: "live updates" }), " ", me.name, ` (${me.role})`);
  route();
}

document.getElementById("sign-out").addEventListener("click", async () => {
  await act("sign out", "DELETE", "/session");
  signedOut("Signed out.");
});

// -- pages -----------------------------------------------------------------------------
function overviewPage() {
  const cards = h("div", { class: "cards" });
  const chartBox = h("div", { class: "panel" });
  const jobs = h("div", {});
  fill(view, h("h1", {}, "Fleet"), cards, chartBox, h("h2", {}, "Jobs"), jobs);
  connect({});
  return {
    update(name, data) {
      if (name !== "fleet") return;
      const sum = (key) => data.jobs.reduce((a, j) => a + (j.live[key] || 0), 0);
      fill(cards,
        card("pages/s", num(sum("pages_per_second"), 1), "pages_per_second"),
        card("items/s", num(sum("items_per_second"), 1), "items_per_second"),
        card("nodes alive", num(data.jobs.reduce((a, j) => a + j.live_nodes, 0)), "nodes_alive"),
        card("jobs running", num(data.jobs.filter((j) => j.state === "running").length), "jobs_running"),
        card("pages (live nodes)", num(sum("pages")), "pages"),
        card("items (live nodes)", num(sum("items")), "items"),
        card("errors", num(sum("errors")), "errors"));
      fill(chartBox, chart(fleetSeries(), "fleet pages/s", chartBox.clientWidth - 32));
      fill(jobs, table(data.jobs, [
        ["job", (j) => h("a", { href: `#/job/${encodeURIComponent(j.job)}` }, j.job)],
        ["state", (j) => badge(j.state)],
        ["progress", (j) => progressBar(progressOf(j).share)],
        ["done", (j) => num(progressOf(j).done), "num"],
        ["queued", (j) => num(j.queued), "num"],
        ["leased", (j) => num(j.leased), "num"],
        ["pages/s", (j) => num(j.live.pages_per_second, 1), "num"],
        ["ETA", (j) => eta(j)],
        ["nodes", (j) => num(j.live_nodes), "num"],
      ], "No job in this Redis yet: queue seeds with crawlfleet seed or POST /api/v1/jobs/JOB/seeds."));
      sizeBars(jobs);
    },
  };
}

const CONTROLS = [
  ["pause", "Pause", "stop taking new requests (requests under way finish)"],
  ["resume", "Resume", "take requests again"],
  ["drain", "Drain", "finish what they hold, then close"],
  ["stop", "Stop", "close now, giving back what they hold"],
];

function jobPage(job) {
  const head = h("h1", {}, "Job ", h("span", { id: "job-name" }, job), h("span", { id: "job-state" }));
  const progress = h("div", { class: "panel", id: "job-progress" });
  const buttons = h("div", { class: "buttons", id: "job-controls" });
  const cards = h("div", { class: "cards" });
  const chartBox = h("div", { class: "panel" });
  const sites = h("div", {});
  const nodes = h("div", {});
  const items = h("div", { class: "panel", id: "latest-items" });
  const limits = h("div", {});
  const runs = h("div", {});
  const events = h("div", {});
  const processes = h("div", {});
  const errors = h("div", { id: "job-errors" });
  const errorButtons = h("div", { class: "buttons" });
  if (can("operator")) {
    errorButtons.append(h("button", { type: "button", "data-command": "recrawl", onclick: async () => {
      if (!(await ask(`Re-crawl every open failure of job ${job}? Each goes back into the frontier as the request that failed.`))) return;
      const result = await act("Re-crawl", "POST", `/api/v1/jobs/${encodeURIComponent(job)}/errors/recrawl`, {});
      if (result) { toast(`Re-crawl: ${result.queued} request(s) queued again`); slow(); }
    } }, "Re-crawl open failures…"));
  }
  let live = 0;
  if (can("operator")) {
    for (const [command, label, what] of CONTROLS) {
      buttons.append(h("button", { type: "button", "data-command": command, class: command === "stop" ? "danger" : "", onclick: async () => {
        if (!(await ask(`${label} job ${job}? Its ${live} live node(s) ${what}.`))) return;
        const result = await act(label, "POST", `/api/v1/jobs/${encodeURIComponent(job)}/control`, { command, wait_seconds: 3 });
        if (result) {
          const sent = result.sent[0];
          const pending = sent.pending.length ? ` (not yet: ${sent.pending.join(", ")})` : "";
          toast(`${label}: acknowledged by ${Object.keys(sent.acked).length} of ${sent.targets.length} node(s)${pending}`);
        }
      } }, label));
    }
    buttons.append(h("button", { type: "button", class: "danger", "data-command": "reset", onclick: async () => {
      if (!(await ask(`Reset job ${job}? Its queues, leases, seen-filter, counters and limits are deleted (refused while nodes are alive).`))) return;
      const result = await act("Reset", "POST", `/api/v1/jobs/${encodeURIComponent(job)}/reset`, {});
      if (result) toast(`Reset: ${result.deleted} keys deleted`);
    } }, "Reset…"));
  }
  const sections = [head, progress, buttons, cards, chartBox,
    h("div", { class: "two" },
      h("section", {}, h("h2", {}, "Sites"), sites),
      h("section", {}, h("h2", {}, "Rate limits"), limits, limitsForm())),
    h("h2", {}, "Nodes"), nodes,
    h("h2", {}, "Latest items"), items,
    h("h2", {}, "Failures (error registry)"), errors, errorButtons];
  if (can("operator")) sections.push(h("h2", {}, "Queue seeds"), seedsForm());
  sections.push(h("div", { class: "two" },
    h("section", {}, h("h2", {}, "Runs"), runs),
    h("section", {}, h("h2", {}, "Changes"), events)),
  h("h2", {}, "Processes started through Scrapyd"), processes);
  fill(view, ...sections);
  connect({ job });

  function limitsForm() {
    if (!can("operator")) return null;
    const pattern = h("input", { name: "pattern", placeholder: "host, *.domain or *", required: true, size: 18 });
    const rate = h("input", { name: "rate", placeholder: "10/1s", required: true, size: 8 });
    const form = h("form", { class: "inline", id: "limits-form" }, pattern, rate, h("button", { type: "submit" }, "Set limit"));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const result = await act("Set limit", "PUT", `/api/v1/jobs/${encodeURIComponent(job)}/limits`, { limits: { [pattern.value.trim()]: rate.value.trim() } });
      if (result) { toast(`Limit of ${pattern.value} set to ${rate.value}`); pattern.value = ""; rate.value = ""; showLimits(result.limits); }
    });
    return form;
  }

  function seedsForm() {
    const area = h("textarea", { name: "seeds", placeholder: "one URL (or JSON seed entry) a line" });
    const form = h("form", { id: "seeds-form" }, area, h("div", { class: "buttons" }, h("button", { type: "submit" }, "Queue seeds")));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const seeds = area.value.split("\n").map((s) => s.trim()).filter(Boolean);
      if (!seeds.length) return;
      const result = await act("Queue seeds", "POST", `/api/v1/jobs/${encodeURIComponent(job)}/seeds`, { seeds });
      if (result) { toast(`${result.queued} queued, ${result.duplicates} already seen, ${result.invalid.length} invalid`); area.value = ""; }
    });
    return form;
  }

  function showLimits(current) {
    const rows = Object.entries(current || {}).map(([p, r]) => ({ pattern: p, rate: r }));
    const columns = [["pattern", (r) => r.pattern], ["limit", (r) => r.rate]];
    if (can("operator")) {
      columns.push(["", (r) => h("button", { type: "button", class: "small", onclick: async () => {
        const result = await act("Remove limit", "DELETE", `/api/v1/jobs/${encodeURIComponent(job)}/limits?pattern=${encodeURIComponent(r.pattern)}`);
        if (result) showLimits(result.limits);
      } }, "remove")]);
    }
    fill(limits, table(rows, columns, "No run-time limit (the nodes' CRAWLFLEET_RATE_LIMITS apply)."));
  }

  async function slow() {
    const enc = encodeURIComponent(job);
    const [l, r, ev, pr, st, er] = await Promise.all([
      api("GET", `/api/v1/jobs/${enc}/limits`).catch(() => null),
      api("GET", `/api/v1/jobs/${enc}/runs?limit=10`).catch(() => null),
      api("GET", `/api/v1/jobs/${enc}/events?limit=10`).catch(() => null),
      api("GET", `/api/v1/jobs/${enc}/processes`).catch(() => null),
      api("GET", `/api/v1/jobs/${enc}/errors/stats`).catch(() => null),
      api("GET", `/api/v1/jobs/${enc}/errors?limit=20`).catch(() => null),
    ]);
    if (st && er) {
      const reasons = Object.entries(st.open_by_reason).map(([r, n]) => `${r} ${n}`).join(", ");
      fill(errors,
        h("div", { class: "progress-line", "data-figure": "errors-summary" },
          `${num(st.by_state.open)} open${reasons ? ` (${reasons})` : ""}, ${num(st.by_state.queued)} queued again, ${num(st.by_state.resolved)} resolved`),
        table(er.errors, [
          ["reason", (e) => badge(e.reason)], ["failures", (e) => num(e.failures), "num"], ["detail", (e) => e.detail],
          ["URL", (e) => link(e.url), "wrap"], ["last seen", (e) => e.last_seen, "hide-narrow"],
        ], "No open failure."));
    }
    if (pr) fill(processes, table(pr.processes.slice(0, 20), [
      ["id", (x) => x.id, "num"], ["Scrapyd", (x) => x.scrapyd], ["spider", (x) => `${x.project} / ${x.spider}`],
      ["state", (x) => badge(x.state)], ["by", (x) => x.started_by], ["started", (x) => x.started_at],
      ["finished", (x) => x.finished_at || ""], ["note", (x) => x.note || ""],
    ], "None (POST /api/v1/jobs/JOB/run starts nodes on registered Scrapyd servers)."));
    if (l) showLimits(l.limits);
    if (r) fill(runs, table(r.runs, [
      ["started", (x) => x.started_at], ["finished", (x) => x.finished_at || "running"], ["state", (x) => badge(x.state)],
      ["by", (x) => x.started_by], ["pages", (x) => num(x.figures && x.figures.pages), "num"],
      ["items", (x) => num(x.figures && x.figures.items), "num"],
    ], "No run recorded yet."));
    if (ev) fill(events, table(ev.events, [["at", (x) => x.at], ["who", (x) => x.actor], ["what", (x) => x.action], ["detail", (x) => text(x.detail)]], "No change made through the manager."));
  }
  slow();

  return {
    tick: slow,
    update(name, data) {
      if (name !== "job") return;
      if (data.error) { fill(progress, data.error); return; }
      live = data.live_nodes;
      fill(document.getElementById("job-state"), badge(data.state));
      const p = progressOf(data);
      fill(progress,
        progressBar(p.share, true),
        h("div", { class: "progress-line" },
          h("span", { "data-figure": "done" }, `${num(p.done)} of ${num(p.total)} requests done (${(p.share * 100).toFixed(1)}%)`),
          h("span", { "data-figure": "eta" }, `ETA ${eta(data)}`)));
      sizeBars(progress);
      fill(cards,
        card("pages/s", num(data.live.pages_per_second, 1), "pages_per_second"),
        card("items/s", num(data.live.items_per_second, 1), "items_per_second"),
        card("queued", num(data.queued), "queued"),
        card("leased", num(data.leased), "leased"),
        card("live nodes", num(data.live_nodes), "live_nodes"),
        card("errors", num(data.live.errors), "errors"),
        card("set aside", num(data.malformed_set_aside), "malformed"));
      fill(chartBox, chart(series.get(job) || [], "pages/s", chartBox.clientWidth - 32));
      const queued = new Map(data.top_sites.map((s) => [s.site, s.queued]));
      const siteNames = [...new Set([...queued.keys(), ...Object.keys(data.site_live)])];
      const siteRows = siteNames.map((site) => ({ site, queued: queued.get(site) || 0, ...(data.site_live[site] || { leased: 0, per_second: 0 }) }));
      siteRows.sort((a, b) => b.queued + b.leased - (a.queued + a.leased) || (a.site < b.site ? -1 : 1));
      fill(sites, table(siteRows, [
        ["site", (s) => s.site],
        ["queued", (s) => num(s.queued), "num"],
        ["leased", (s) => num(s.leased), "num"],
        ["rate /s", (s) => num(s.per_second, 1), "num"],
        ["limit /s", (s) => num(data.site_limits_per_s[s.site], 2), "num"],
        ["back-off ms", (s) => num(data.backoff_ms[s.site]), "num hide-narrow"],
        ["crawl-delay ms", (s) => num(data.robots_delay_ms[s.site]), "num hide-narrow"],
      ], "No site queued or crawled."));
      const nodeRows = Object.entries(data.nodes).map(([node, info]) => ({ node, ...info }));
      fill(nodes, nodeTable(nodeRows, false));
      const latest = nodeRows.flatMap((n) => (Array.isArray(n.latest_items) ? n.latest_items : []));
      fill(items, latest.length ? latest.slice(0, 6).map(itemView) : h("div", { class: "empty" }, "No item from a live node yet."));
    },
  };
}

function itemView(item) {
  return h("div", { class: "item" }, h("dl", {}, Object.entries(item).map(([k, v]) => [
    h("dt", {}, k), h("dd", {}, k === "url" ? link(v) : text(v)),
  ])));
}

function nodeTable(rows, withJob) {
  const columns = [];
  if (withJob) columns.push(["job", (n) => h("a", { href: `#/job/${encodeURIComponent(n.job)}` }, n.job)]);
  columns.push(
    ["node", (n) => n.node],
    ["host", (n) => `${text(n.host)} ${n.ip ? `(${n.ip})` : ""}`],
    ["state", (n) => badge(n.alive ? (n.state || "alive") : "dead")],
    ["pages/min", (n) => num(n.pages_per_min, 1), "num"],
    ["latency ms", (n) => num(n.latency_ms, 0), "num"],
    ["concurrency", (n) => `${text(n.in_flight)}/${text(n.concurrency)}`, "num"],
    ["CPU %", (n) => num(n.cpu_percent, 0), "num"],
    ["loop lag ms", (n) => num(n.loop_lag_max_ms, 0), "num"],
    ["leases", (n) => num(n.held), "num"],
    ["memory", (n) => bytes(n.rss_bytes), "num"],
  );
  if (can("operator")) {
    columns.push(["", (n) => n.alive ? h("span", { class: "buttons" }, ["pause", "resume"].map((command) =>
      h("button", { type: "button", class: "small", "data-node-command": command, onclick: async () => {
        const result = await act(command, "POST", `/api/v1/nodes/${encodeURIComponent(n.node)}/control`, { command, job: n.job || undefined, wait_seconds: 3 });
        if (result) toast(`${command} sent to ${n.node}: ${Object.keys(result.sent[0].acked).length ? "acknowledged" : "not acknowledged yet"}`);
      } }, command))) : ""]);
  }
  return table(rows, columns, "No node.");
}

function nodesPage() {
  const box = h("div", {});
  fill(view, h("h1", {}, "Nodes"), box);
  connect({ nodes: "true" });
  return {
    update(name, data) {
      if (name === "nodes") fill(box, nodeTable(data.nodes, true));
    },
  };
}

function listPage(title, loaders) {
  // A page of tables loaded from the API, refreshed every few seconds; a loader is
  // [heading, path, key of the rows, columns, text when empty, rows => rows shown].
  const boxes = loaders.map(() => h("div", {}));
  fill(view, h("h1", {}, title), loaders.map(([heading], i) => [h("h2", {}, heading), boxes[i]]));
  connect({});
  async function load() {
    await Promise.all(loaders.map(async ([, path, key, columns, empty, pick], i) => {
      try {
        const data = await api("GET", path);
        fill(boxes[i], table(pick ? pick(data[key]) : data[key], columns, empty));
      } catch (err) {
        fill(boxes[i], h("div", { class: "error-text" }, err.message));
      }
    }));
  }
  load();
  return { tick: load };
}

function scrapydPage() {
  return listPage("Scrapyd", [["Scrapyd nodes", "/api/v1/scrapyd", "scrapyd", [
    ["name", (s) => s.name], ["URL", (s) => s.url], ["reachable", (s) => badge(s.reachable ? "ok" : "failed")],
    ["running", (s) => num(s.running), "num"], ["pending", (s) => num(s.pending), "num"],
    ["CPU %", (s) => num(s.cpu_percent), "num"], ["error", (s) => s.error || ""],
  ], "No Scrapyd registered (POST /api/v1/scrapyd, see docs/manager.md)."],
  ["Deployments and Scrapyd changes", "/api/v1/events?limit=500", "events", [
    ["at", (e) => e.at], ["who", (e) => e.actor], ["what", (e) => e.action], ["job", (e) => e.job || ""],
    ["detail", (e) => text(e.detail)],
  ], "No deployment yet (crawlfleet deploy --manager URL).",
  (events) => events.filter((e) => /^(deploy|scrapyd\.|job\.run|process\.)/.test(e.action)).slice(0, 30)]]);
}

function timersPage() {
  const columns = [
    ["name", (t) => t.name], ["job", (t) => t.job], ["cron (UTC)", (t) => t.cron], ["action", (t) => t.action],
    ["enabled", (t) => (t.enabled ? "yes" : "no")], ["next due (UTC)", (t) => t.next_fire_at || ""],
  ];
  if (can("operator")) {
    columns.push(["", (t) => h("button", { type: "button", class: "small", "data-timer": t.name, onclick: async () => {
      const result = await act("Timer", "PATCH", `/api/v1/timers/${encodeURIComponent(t.name)}`, { enabled: !t.enabled });
      if (result) { toast(`Timer ${t.name} ${result.enabled ? "enabled" : "disabled"}`); if (page && page.tick) page.tick(); }
    } }, t.enabled ? "disable" : "enable")]);
  }
  const list = h("div", {});
  const fires = h("div", {});
  fill(view, h("h1", {}, "Timers"), list, h("h2", {}, "Latest due times"), fires);
  connect({});
  async function load() {
    try {
      const timers = (await api("GET", "/api/v1/timers")).timers;
      fill(list, table(timers, columns, "No timer (POST /api/v1/timers, see docs/manager.md)."));
      const each = await Promise.all(timers.slice(0, 20).map((t) =>
        api("GET", `/api/v1/timers/${encodeURIComponent(t.name)}/fires?limit=5`).catch(() => ({ name: t.name, fires: [] }))));
      const rows = each.flatMap((f) => f.fires.map((x) => ({ timer: f.name, ...x })));
      rows.sort((a, b) => (a.due_at < b.due_at ? 1 : -1));
      fill(fires, table(rows.slice(0, 50), [
        ["timer", (x) => x.timer], ["due (UTC)", (x) => x.due_at], ["outcome", (x) => badge(x.outcome)],
        ["fired at", (x) => x.fired_at || ""], ["detail", (x) => x.detail || ""],
      ], "No due time has come yet."));
    } catch (err) {
      fill(list, h("div", { class: "error-text" }, err.message));
    }
  }
  load();
  return { tick: load };
}

function alertsPage() {
  return listPage("Alerts", [
    ["Alerts", "/api/v1/alerts", "alerts", [
      ["rule", (a) => a.rule], ["job", (a) => a.job], ["status", (a) => badge(a.status)], ["since", (a) => a.since],
      ["value", (a) => num(a.value, 2), "num"],
      ["deliveries", (a) => (a.deliveries || []).map((d) => `${d.event} #${d.attempt}: ${d.ok ? "ok" : `failed ${text(d.http_status || d.error)}`}`).join("; ")],
    ], "No alert."],
    ["Rules", "/api/v1/alerts/rules", "rules", [
      ["name", (r) => r.name], ["job", (r) => r.job || "any"], ["when", (r) => `${r.metric} ${r.op} ${r.threshold} for ${r.for_seconds}s`],
      ["webhook", (r) => r.webhook], ["enabled", (r) => (r.enabled ? "yes" : "no")],
    ], "No rule."],
  ]);
}

// -- routing ---------------------------------------------------------------------------
let ticker = null;
function route() {
  if (!me) return;
  const hash = location.hash || "#/";
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.getAttribute("href") === hash);
  const job = hash.match(/^#\/job\/(.+)$/);
  let name = null;
  if (job) {
    try { name = decodeURIComponent(job[1]); } catch { name = null; }
  }
  if (name !== null) page = jobPage(name);
  else if (hash === "#/nodes") page = nodesPage();
  else if (hash === "#/scrapyd") page = scrapydPage();
  else if (hash === "#/timers") page = timersPage();
  else if (hash === "#/alerts") page = alertsPage();
  else page = overviewPage();
  if (ticker) clearInterval(ticker);
  ticker = setInterval(() => { if (page && page.tick) page.tick(); }, 5000);
}

window.addEventListener("hashchange", route);
checkSession();
