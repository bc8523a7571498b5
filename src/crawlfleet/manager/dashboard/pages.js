// crawlfleet dashboard: the overview, a job's page and the nodes' page.

import { act, api, can, connect, fleetSeries, series } from "./core.js";
import {
  ask, badge, bytes, card, chart, duration, fill, h, link, num, progressBar, sizeBars, table, text, toast, view,
} from "./dom.js";

function progressOf(job) {
  const done = (job.counters && job.counters.acked) || 0;
  const total = done + (job.queued || 0) + (job.leased || 0);
  return { done, total, share: total ? done / total : 0 };
}

function eta(job) {
  if (job.state === "finished") return "done";
  if (job.eta_seconds === null || job.eta_seconds === undefined) {
    return job.eta_limited_by && job.eta_limited_by !== "unknown" ? `– (${job.eta_limited_by})` : "–";
  }
  return duration(job.eta_seconds) + (job.eta_limited_by ? ` (${job.eta_limited_by})` : "");
}

// A rate-limits table with, for operators, a form to set one and a button to remove
// each: the fleet's (/api/v1/limits) or a job's own (/api/v1/jobs/JOB/limits).
function limitsEditor(path, formId, empty) {
  const box = h("div", {});
  function show(current) {
    const rows = Object.entries(current || {}).map(([p, r]) => ({ pattern: p, rate: r }));
    const columns = [["pattern", (r) => r.pattern], ["limit", (r) => r.rate]];
    if (can("operator")) {
      columns.push(["", (r) => h("button", { type: "button", class: "small", onclick: async () => {
        const result = await act("Remove limit", "DELETE", `${path}?pattern=${encodeURIComponent(r.pattern)}`);
        if (result) show(result.limits);
      } }, "remove")]);
    }
    fill(box, table(rows, columns, empty));
  }
  let form = null;
  if (can("operator")) {
    const pattern = h("input", { name: "pattern", placeholder: "host, *.domain or *", required: true, size: 18 });
    const rate = h("input", { name: "rate", placeholder: "10/1s", required: true, size: 8 });
    form = h("form", { class: "inline", id: formId }, pattern, rate, h("button", { type: "submit" }, "Set limit"));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const result = await act("Set limit", "PUT", path, { limits: { [pattern.value.trim()]: rate.value.trim() } });
      if (result) { toast(`Limit of ${pattern.value} set to ${rate.value}`); pattern.value = ""; rate.value = ""; show(result.limits); }
    });
  }
  async function load() {
    const current = await api("GET", path).catch(() => null);
    if (current) show(current.limits);
  }
  return { box, form, show, load };
}

export function overviewPage() {
  const cards = h("div", { class: "cards" });
  const chartBox = h("div", { class: "panel" });
  const jobs = h("div", {});
  const limits = limitsEditor("/api/v1/limits", "fleet-limits-form",
    "No fleet limit set at run time: the nodes' CRAWLFLEET_RATE_LIMITS apply. A limit set here holds for every job together (one budget per site).");
  fill(view, h("h1", {}, "Fleet"), cards, chartBox, h("h2", {}, "Jobs"), jobs,
    h("h2", {}, "Fleet rate limits"), h("section", { id: "fleet-limits" }, limits.box, limits.form));
  connect({});
  limits.load();
  return {
    tick: limits.load,
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

export function jobPage(job) {
  const head = h("h1", {}, "Job ", h("span", { id: "job-name" }, job), h("span", { id: "job-state" }));
  const progress = h("div", { class: "panel", id: "job-progress" });
  const buttons = h("div", { class: "buttons", id: "job-controls" });
  const cards = h("div", { class: "cards" });
  const chartBox = h("div", { class: "panel" });
  const sites = h("div", {});
  const nodes = h("div", {});
  const items = h("div", { class: "panel", id: "latest-items" });
  const limits = limitsEditor(`/api/v1/jobs/${encodeURIComponent(job)}/limits`, "limits-form",
    "No limit of this job's own: the fleet's limits apply (crawlfleet limits --fleet, else the nodes' CRAWLFLEET_RATE_LIMITS). A limit set here gives this job a budget of its own.");
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
      h("section", {}, h("h2", {}, "This job's own rate limits"), limits.box, limits.form)),
    h("h2", {}, "Nodes"), nodes,
    h("h2", {}, "Latest items ", h("a", { href: `#/job/${encodeURIComponent(job)}/items`, id: "job-items-link", class: "more" }, "Items ›")), items,
    h("h2", {}, "Failures (error registry)"), errors, errorButtons];
  if (can("operator")) sections.push(h("h2", {}, "Queue seeds"), seedsForm());
  sections.push(h("div", { class: "two" },
    h("section", {}, h("h2", {}, "Runs"), runs),
    h("section", {}, h("h2", {}, "Changes"), events)),
  h("h2", {}, "Processes started through Scrapyd ",
    h("a", { href: `#/job/${encodeURIComponent(job)}/runs`, id: "job-runs-link", class: "more" }, can("operator") ? "start a run, logs, cancel ›" : "logs ›")),
  processes);
  fill(view, ...sections);
  connect({ job });

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

  async function slow() {
    const enc = encodeURIComponent(job);
    const [, r, ev, pr, st, er] = await Promise.all([
      limits.load(),
      api("GET", `/api/v1/jobs/${enc}/runs?limit=10`).catch(() => null),
      api("GET", `/api/v1/jobs/${enc}/events?limit=10`).catch(() => null),
      api("GET", `/api/v1/jobs/${enc}/processes`).catch(() => null),
      api("GET", `/api/v1/jobs/${enc}/errors/stats`).catch(() => null),
      api("GET", `/api/v1/jobs/${enc}/errors?limit=20`).catch(() => null),
    ]);
    if (st && er) {
      const reasons = Object.entries(st.open_by_reason).map(([r, n]) => `${r} ${n}`).join(", ");
      const elsewhere = Object.entries(st.nodes_elsewhere || {});
      fill(errors,
        h("div", { class: "progress-line", "data-figure": "errors-summary" },
          `${num(st.by_state.open)} open${reasons ? ` (${reasons})` : ""}, ${num(st.by_state.queued)} queued again, ${num(st.by_state.resolved)} resolved`),
        elsewhere.length ? h("p", { class: "warning", "data-figure": "errors-elsewhere" },
          `${elsewhere.length} live node(s) write their failures to another state DB, not counted here: `
          + elsewhere.map(([node, where]) => `${node} (${where})`).join(", ")
          + `. This manager reads ${st.state_db}: set CRAWLFLEET_STATE_DB_URL in the project to it (docs/manager.md).`) : null,
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
      // a node in a long phase (a re-crawl round, a campaign) says where it is
      const phases = Object.entries(data.nodes).filter(([, n]) => n.alive && typeof n.phase === "string" && n.phase);
      for (const [node, n] of phases) {
        progress.append(h("div", { class: "progress-line", "data-figure": "phase" }, `${node}: ${n.phase}`));
      }
      sizeBars(progress);
      fill(cards,
        card("pages/s", num(data.live.pages_per_second, 1), "pages_per_second"),
        card("items/s", num(data.live.items_per_second, 1), "items_per_second"),
        card("queued", num(data.queued), "queued"),
        card("leased", num(data.leased), "leased"),
        card("live nodes", num(data.live_nodes), "live_nodes"),
        card("errors", num(data.live.errors), "errors"),
        card("set aside", num(data.malformed_set_aside), "malformed"),
        data.shards > 1 && card("shards", num(data.shards), "shards"),
        // a continuous job: how fresh its copy is (crawlfleet.fleet.freshness)
        data.freshness && card("tracked", num(data.freshness.tracked), "tracked"),
        data.freshness && card("changes in 1 h", num(data.freshness.changes_last_hour), "changes_last_hour"),
        data.freshness && card("copy age (median)", data.freshness.age_p50_s == null ? "–" : duration(data.freshness.age_p50_s), "copy_age"),
        data.freshness && card("revisits behind", num(data.freshness.behind), "revisits_behind"));
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

export function nodeTable(rows, withJob) {
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

export function nodesPage() {
  const box = h("div", {});
  fill(view, h("h1", {}, "Nodes"), box);
  connect({ nodes: "true" });
  return {
    update(name, data) {
      if (name === "nodes") fill(box, nodeTable(data.nodes, true));
    },
  };
}
