// crawlfleet dashboard: campaigns (task units in the state DB that a job's nodes feed
// from a cursor): every campaign's progress, and one campaign's units, failures and
// controls (pause, resume, stop, extend), from /api/v1/campaigns.

import { act, api, can, connect } from "./core.js";
import { ask, badge, card, duration, fill, h, num, progressBar, sizeBars, table, toast, view } from "./dom.js";

function campaignHref(name) {
  return `#/campaign/${encodeURIComponent(name)}`;
}

function percent(share) {
  return `${(share * 100).toFixed(1)}%`;
}

function etaOf(c) {
  if (c.state === "finished") return "done";
  if (c.state === "paused") return "– (paused)";
  return c.eta_seconds === null || c.eta_seconds === undefined ? "–" : duration(c.eta_seconds);
}

export function campaignsPage() {
  const list = h("div", { id: "campaigns" });
  fill(view, h("h1", {}, "Campaigns"), list,
    h("p", { class: "muted" }, "A campaign is made with crawlfleet campaign create or POST /api/v1/campaigns (docs/campaigns.md); its job's nodes feed it."));
  connect({});
  async function load() {
    try {
      const { campaigns } = await api("GET", "/api/v1/campaigns");
      fill(list, table(campaigns, [
        ["campaign", (c) => h("a", { href: campaignHref(c.name) }, c.name)],
        ["job", (c) => h("a", { href: `#/job/${encodeURIComponent(c.job)}` }, c.job)],
        ["state", (c) => badge(c.state)],
        ["progress", (c) => progressBar(c.progress)],
        ["units", (c) => `${num(c.units.done + c.units.failed)} of ${num(c.total)} (${percent(c.progress)})`, "num"],
        ["failed", (c) => num(c.units.failed), "num"],
        ["units/min", (c) => num(c.rate_per_min, 1), "num"],
        ["ETA", (c) => etaOf(c)],
      ], "No campaign yet."));
      sizeBars(list);
    } catch (err) {
      fill(list, h("div", { class: "error-text" }, err.message));
    }
  }
  load();
  return { tick: load };
}

const COMMANDS = [
  ["pause", "Pause", "its job's nodes stop taking requests; the cursor stays where it is", ["running"]],
  ["resume", "Resume", "its job's nodes take requests again", ["paused"]],
  ["stop", "Stop", "no unit is issued any more; what is queued is finished", ["running", "paused"]],
];

export function campaignPage(name) {
  const state = h("span", { id: "campaign-state" });
  const progress = h("div", { class: "panel", id: "campaign-progress" });
  const buttons = h("div", { class: "buttons", id: "campaign-controls" });
  const cards = h("div", { class: "cards" });
  const about = h("div", { id: "campaign-about" });
  const failed = h("div", { id: "campaign-failed" });
  const enc = encodeURIComponent(name);
  let current = null;
  fill(view, h("h1", {}, h("a", { href: "#/campaigns" }, "Campaigns"), " › ", h("span", { id: "campaign-name" }, name), state),
    progress, buttons, cards, about, h("h2", {}, "Failed units (attempts spent)"), failed);

  async function steer(command, label, what) {
    if (!(await ask(`${label} campaign ${name}? ${what[0].toUpperCase()}${what.slice(1)}.`))) return;
    const result = await act(label, "POST", `/api/v1/campaigns/${enc}/${command}`);
    if (result) { toast(`Campaign ${name}: ${result.state}`); load(); }
  }

  function controls(c) {
    if (!can("operator")) { fill(buttons); return; }
    const extendTo = h("input", { type: "date", id: "campaign-extend-to", required: true });
    const extend = h("form", { class: "inline", id: "campaign-extend" }, extendTo, h("button", { type: "submit" }, "Extend to this date"));
    extend.addEventListener("submit", async (e) => {
      e.preventDefault();
      const result = await act("Extend", "POST", `/api/v1/campaigns/${enc}/extend`, { to: extendTo.value });
      if (result) { toast(`Campaign ${name} extended to ${extendTo.value}: ${num(result.total)} units`); load(); }
    });
    fill(buttons,
      COMMANDS.map(([command, label, what, from]) => h("button", {
        type: "button", "data-command": command, class: command === "stop" ? "danger" : "",
        disabled: !from.includes(c.state), onclick: () => steer(command, label, what),
      }, label)),
      c.params && c.params.to && c.state !== "finished" ? extend : null);
  }

  function show(c) {
    const changed = !current || current.state !== c.state;
    current = c;
    fill(state, badge(c.state));
    fill(progress, progressBar(c.progress, true), h("div", { class: "progress-line" },
      h("span", { "data-figure": "units-done" }, `${num(c.units.done + c.units.failed)} of ${num(c.total)} units done (${percent(c.progress)})`),
      h("span", { "data-figure": "eta" }, `ETA ${etaOf(c)}`)));
    sizeBars(progress);
    fill(cards,
      card("done", num(c.units.done), "done"), card("failed", num(c.units.failed), "failed"),
      card("in progress", num(c.units.leased + c.units.fed), "in_progress"),
      card("to do", num(c.total - c.units.done - c.units.failed - c.units.leased - c.units.fed), "to_do"),
      card("units/min", num(c.rate_per_min, 1), "rate"));
    fill(about, table([c], [
      ["job", (x) => h("a", { href: `#/job/${encodeURIComponent(x.job)}` }, x.job)],
      ["spider", (x) => x.spider || "–"], ["URL template", (x) => x.template || "–", "wrap"],
      ["cursor", (x) => num(x.cursor), "num"], ["attempts", (x) => num(x.max_attempts), "num"],
      ["created", (x) => x.created_at], ["started", (x) => x.started_at || "–"], ["finished", (x) => x.finished_at || "–"],
    ]));
    fill(failed, table(c.failed || [], [["unit", (u) => u.unit], ["attempts", (u) => num(u.attempts), "num"], ["error", (u) => u.error || "", "wrap"]],
      "No unit failed for good."));
    if (changed) controls(c);
  }

  async function load() {
    try {
      show(await api("GET", `/api/v1/campaigns/${enc}`));
    } catch (err) {
      fill(progress, h("div", { class: "error-text" }, err.message));
    }
  }
  connect({});
  load();
  return { tick: load };
}
