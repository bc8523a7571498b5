// crawlfleet dashboard: a job's runs through Scrapyd (start one, follow and cancel its
// processes) and a process's log, read live (the API: /api/v1/jobs/JOB/run, /processes,
// /processes/ID/cancel, /processes/ID/log; /api/v1/scrapyd/projects for the form).

import { act, api, can, connect } from "./core.js";
import { ask, badge, fill, h, num, table, toast, view } from "./dom.js";

const LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"];
// a Scrapy log line: "2026-11-26 12:00:00 [logger] LEVEL: message"
const LEVEL_RE = /^\S+ \S+ \[[^\]]*\] (DEBUG|INFO|WARNING|ERROR|CRITICAL): /;
const LOG_POLL_MS = 2000;

function jobHref(job, tail = "") {
  return `#/job/${encodeURIComponent(job)}${tail}`;
}

// "NAME=value" lines as an object; the first bad line is an error naming it
function pairs(textValue, what) {
  const out = {};
  for (const [i, raw] of textValue.split("\n").entries()) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`${what}, line ${i + 1}: "${line.slice(0, 60)}" is not NAME=value`);
    out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}

// The form that starts a run: project and spider as Scrapyd lists them, where to run
// (least-loaded, all, or the Scrapyd nodes ticked), how many, settings and arguments.
function runForm(job, started) {
  const box = h("div", { class: "panel", id: "run-form-box" }, h("div", { class: "empty" }, "Asking the Scrapyd nodes what is deployed…"));
  async function load() {
    let known;
    try {
      known = await api("GET", "/api/v1/scrapyd/projects");
    } catch (err) {
      fill(box, h("div", { class: "error-text" }, err.message));
      return;
    }
    const unreachable = known.errors.map((e) => h("p", { class: "warning" }, e.error));
    if (!known.projects.length) {
      fill(box, unreachable, h("div", { class: "empty" },
        "No project is deployed on a registered Scrapyd: register one on the Scrapyd page, then deploy with crawlfleet deploy."));
      return;
    }
    const project = h("select", { name: "project", id: "run-project" }, known.projects.map((p) => h("option", { value: p.project }, p.project)));
    const spider = h("select", { name: "spider", id: "run-spider" });
    const where = h("select", { name: "nodes", id: "run-nodes" },
      h("option", { value: "least-loaded" }, "least-loaded Scrapyd nodes"),
      h("option", { value: "all" }, "every Scrapyd"),
      h("option", { value: "chosen" }, "the Scrapyd nodes ticked"));
    const chosen = h("span", { class: "choices", id: "run-chosen", hidden: true });
    const count = h("input", { type: "number", name: "count", id: "run-count", min: 1, max: 100, value: 1, size: 4 });
    const countLabel = h("span", { class: "muted" });
    const settings = h("textarea", { name: "settings", id: "run-settings", placeholder: "Scrapy settings, NAME=value a line (CONCURRENT_REQUESTS=8)" });
    const args = h("textarea", { name: "args", id: "run-args", placeholder: "spider arguments, name=value a line (start_urls=the first page)" });
    const error = h("div", { class: "error-text" });
    function pickProject() {
      const p = known.projects.find((x) => x.project === project.value);
      fill(spider, p.spiders.map((s) => h("option", { value: s }, s)));
      fill(chosen, p.scrapyd.map((name) => h("label", {}, h("input", { type: "checkbox", value: name, checked: true }), ` ${name}`)));
    }
    function pickWhere() {
      chosen.hidden = where.value !== "chosen";
      fill(countLabel, where.value === "least-loaded" ? "processes in all" : "processes on each node");
    }
    project.addEventListener("change", pickProject);
    where.addEventListener("change", pickWhere);
    pickProject();
    pickWhere();
    const form = h("form", { id: "run-form" },
      h("div", { class: "form-row" },
        h("label", {}, "project ", project), h("label", {}, "spider ", spider),
        h("label", {}, "on ", where), chosen, h("label", {}, count, " ", countLabel)),
      h("div", { class: "two" }, settings, args),
      error,
      h("div", { class: "buttons" }, h("button", { type: "submit", class: "primary" }, "Start run")));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      fill(error, "");
      const body = { project: project.value, spider: spider.value, count: Number(count.value) || 1 };
      try {
        body.settings = pairs(settings.value, "settings");
        body.args = pairs(args.value, "arguments");
      } catch (err) {
        fill(error, err.message);
        return;
      }
      if (where.value === "chosen") {
        body.nodes = [...chosen.querySelectorAll("input:checked")].map((c) => c.value);
        if (!body.nodes.length) { fill(error, "tick at least one Scrapyd"); return; }
      } else {
        body.nodes = where.value;
      }
      const result = await act("Start run", "POST", `/api/v1/jobs/${encodeURIComponent(job)}/run`, body);
      if (!result) return;
      const on = result.started.map((s) => `${s.scrapyd} (#${s.id})`).join(", ");
      const failed = result.errors.length ? `; not started: ${result.errors.map((x) => x.error || x).join("; ")}` : "";
      toast(`Run started: ${result.started.length} process(es) on ${on}${failed}`, Boolean(result.errors.length));
      started();
    });
    fill(box, unreachable, form);
  }
  return { box, load };
}

export function runsPage(job) {
  const processes = h("div", { id: "processes" });
  const runs = h("div", { id: "runs" });
  const form = can("operator") ? runForm(job, () => load()) : null;
  fill(view,
    h("h1", {}, h("a", { href: jobHref(job) }, "Job ", job), " › Runs"),
    form ? [h("h2", {}, "Start a run on Scrapyd"), form.box] : null,
    h("h2", {}, "Processes started through Scrapyd"), processes,
    h("h2", {}, "Runs (every node of the job, however started)"), runs);
  connect({ job });

  async function cancel(p) {
    if (!(await ask(`Cancel process #${p.id} (${p.spider} on ${p.scrapyd})? It gets TERM and 10 s to finish its requests in flight and write its items, then KILL.`))) return;
    toast(`Cancelling #${p.id}…`);
    const result = await act("Cancel", "POST", `/api/v1/jobs/${encodeURIComponent(job)}/processes/${p.id}/cancel`, { grace_seconds: 10 });
    if (result) toast(`Process #${result.id}: ${result.state}${result.note ? ` (${result.note})` : ""}`, result.state !== "cancelled");
    load();
  }

  async function load() {
    const enc = encodeURIComponent(job);
    const [pr, r] = await Promise.all([
      api("GET", `/api/v1/jobs/${enc}/processes`).catch((err) => ({ error: err.message })),
      api("GET", `/api/v1/jobs/${enc}/runs?limit=20`).catch((err) => ({ error: err.message })),
    ]);
    const columns = [
      ["id", (x) => x.id, "num"], ["Scrapyd", (x) => x.scrapyd], ["spider", (x) => `${x.project} / ${x.spider}`],
      ["state", (x) => badge(x.state)], ["by", (x) => x.started_by], ["started", (x) => x.started_at],
      ["finished", (x) => x.finished_at || ""], ["note", (x) => x.note || ""],
      ["", (x) => h("span", { class: "buttons" },
        h("a", { href: jobHref(job, `/log/${x.id}`), "data-log": x.id }, "log"),
        can("operator") && (x.state === "running" || x.state === "pending")
          ? h("button", { type: "button", class: "small danger", "data-cancel": x.id, onclick: () => cancel(x) }, "cancel") : null)],
    ];
    fill(processes, pr.error ? h("div", { class: "error-text" }, pr.error)
      : table(pr.processes, columns, "No process started through Scrapyd for this job yet."));
    fill(runs, r.error ? h("div", { class: "error-text" }, r.error) : table(r.runs, [
      ["started", (x) => x.started_at], ["finished", (x) => x.finished_at || "running"], ["state", (x) => badge(x.state)],
      ["by", (x) => x.started_by], ["nodes", (x) => num(x.nodes_max), "num"],
      ["pages", (x) => num(x.figures && x.figures.pages), "num"], ["items", (x) => num(x.figures && x.figures.items), "num"],
      ["errors", (x) => num(x.figures && x.figures.errors), "num"],
    ], "No run recorded yet."));
  }
  if (form) form.load();
  load();
  return { tick: load };
}

// One line's level: its own, or (a traceback's lines) the level of the line it follows.
function levelled(textValue) {
  let level = "INFO";
  return textValue.split("\n").filter((line, i, all) => line || i < all.length - 1).map((line) => {
    const found = LEVEL_RE.exec(line);
    if (found) level = found[1];
    return { line, level };
  });
}

export function logPage(job, pid) {
  const state = h("span", { id: "log-state" });
  const counts = h("div", { class: "progress-line", id: "log-levels" });
  const level = h("select", { id: "log-level" }, LEVELS.map((l) => h("option", { value: l, selected: l === "INFO" }, `${l} and above`)));
  const filter = h("input", { type: "search", id: "log-filter", placeholder: "lines containing…", size: 24 });
  const tail = h("select", { id: "log-tail" },
    [[65536, "last 64 KiB"], [1 << 20, "last 1 MiB"], [10 << 20, "last 10 MiB"]].map(([n, l]) => h("option", { value: n }, l)));
  const follow = h("input", { type: "checkbox", id: "log-follow", checked: true });
  const shown = h("div", { class: "muted", id: "log-shown" });
  const pre = h("pre", { class: "log", id: "log-text" });
  fill(view,
    h("h1", {}, h("a", { href: jobHref(job) }, "Job ", job), " › ", h("a", { href: jobHref(job, "/runs") }, "Runs"), ` › Log of process #${pid}`, state),
    h("form", { class: "inline", id: "log-controls" }, level, filter, tail, h("label", {}, follow, " follow (read again every 2 s while it runs)")),
    counts, shown, pre);
  connect({ job });
  let lines = [];
  let timer = null;

  function render() {
    const min = LEVELS.indexOf(level.value);
    const needle = filter.value.toLowerCase();
    const kept = lines.filter((l) => LEVELS.indexOf(l.level) >= min && (!needle || l.line.toLowerCase().includes(needle)));
    const atEnd = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
    pre.textContent = kept.map((l) => l.line).join("\n");
    fill(shown, `${num(kept.length)} of ${num(lines.length)} lines shown`);
    if (follow.checked && atEnd) pre.scrollTop = pre.scrollHeight;
  }

  async function load() {
    clearTimeout(timer);
    let got;
    try {
      got = await api("GET", `/api/v1/jobs/${encodeURIComponent(job)}/processes/${pid}/log?tail_bytes=${tail.value}`);
    } catch (err) {
      fill(counts, h("span", { class: "error-text" }, err.message));
      timer = setTimeout(load, LOG_POLL_MS * 3);
      return;
    }
    fill(state, badge(got.state));
    fill(counts, LEVELS.map((l) => h("span", { "data-level": l }, `${l} ${num(got.levels[l])}`)));
    lines = levelled(got.text);
    if (!got.text) lines = [];
    render();
    if (!lines.length) fill(shown, "The log is empty so far (Scrapyd writes it as the process runs).");
    if (follow.checked && (got.state === "running" || got.state === "pending")) timer = setTimeout(load, LOG_POLL_MS);
  }
  level.addEventListener("change", render);
  filter.addEventListener("input", render);
  tail.addEventListener("change", load);
  follow.addEventListener("change", load);
  load();
  return { leave: () => clearTimeout(timer) };
}
