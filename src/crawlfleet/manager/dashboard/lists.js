// crawlfleet dashboard: the Scrapyd, timers and alerts pages (tables from the API).

import { act, api, can, connect, session } from "./core.js";
import { ask, badge, fill, h, num, table, text, toast, view } from "./dom.js";

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

export function scrapydPage() {
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

export function timersPage() {
  const columns = [
    ["name", (t) => t.name], ["job", (t) => t.job], ["cron (UTC)", (t) => t.cron], ["action", (t) => t.action],
    ["enabled", (t) => (t.enabled ? "yes" : "no")], ["next due (UTC)", (t) => t.next_fire_at || ""],
  ];
  if (can("operator")) {
    columns.push(["", (t) => h("button", { type: "button", class: "small", "data-timer": t.name, onclick: async () => {
      const result = await act("Timer", "PATCH", `/api/v1/timers/${encodeURIComponent(t.name)}`, { enabled: !t.enabled });
      if (result) { toast(`Timer ${t.name} ${result.enabled ? "enabled" : "disabled"}`); if (session.page && session.page.tick) session.page.tick(); }
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

export function alertsPage() {
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

export function proxiesPage() {
  const list = h("div", { id: "proxies" });
  let form = null;
  if (can("admin")) {
    const urls = h("textarea", { name: "proxies", id: "proxies-add", placeholder: "proxy URLs, one a line (scheme, user:password@host:port)" });
    form = h("form", { id: "proxies-form" }, urls, h("div", { class: "buttons" }, h("button", { type: "submit" }, "Add to the pool")));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const proxies = urls.value.split("\n").map((s) => s.trim()).filter(Boolean);
      if (!proxies.length) return;
      const result = await act("Add proxies", "POST", "/api/v1/proxies", { proxies });
      if (result) { toast(`${result.added} proxy(ies) added; ${result.size} live in the pool`); urls.value = ""; load(); }
    });
  }
  const columns = [
    ["id", (p) => p.id], ["proxy", (p) => p.proxy], ["state", (p) => badge(p.state)],
    ["uses now", (p) => num(p.uses), "num"], ["ok", (p) => num(p.ok), "num"],
    ["failures", (p) => num(p.failures), "num"], ["bans", (p) => num(p.bans), "num"],
  ];
  if (can("admin")) {
    columns.push(["", (p) => (p.state === "removed" ? "" : h("button", { type: "button", class: "small danger", "data-remove": p.id, onclick: async () => {
      if (!(await ask(`Take proxy ${p.proxy} out of the pool for good? Nodes stop using it at their next pick.`))) return;
      const result = await act("Remove proxy", "DELETE", `/api/v1/proxies/${encodeURIComponent(p.id)}`);
      if (result) { toast(`Proxy ${p.proxy} removed`); load(); }
    } }, "remove"))]);
  }
  fill(view, h("h1", {}, "Proxy pool"), list,
    form ? [h("h2", {}, "Add proxies"), form] : null,
    h("p", { class: "muted" }, "The fleet's shared pool (CRAWLFLEET_PROXY_ENABLED): nodes pick the least used live proxy for each request; a failing one cools down, a banned one rests per site. Passwords show as ***."));
  connect({});
  async function load() {
    try {
      fill(list, table((await api("GET", "/api/v1/proxies")).proxies, columns,
        "No proxy in the pool (CRAWLFLEET_PROXIES on the nodes, crawlfleet proxies add, or the form below for an admin)."));
    } catch (err) {
      fill(list, h("div", { class: "error-text" }, err.message));
    }
  }
  load();
  return { tick: load };
}
