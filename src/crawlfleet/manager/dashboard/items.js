// crawlfleet dashboard: a job's stored items (GET /api/v1/jobs/JOB/items), newest first,
// searchable by URL or a field, a page at a time, with export links for the filtered
// view. Every value of an item enters the page as text (dom.js).

import { api, connect } from "./core.js";
import { fill, h, link, num, text, view } from "./dom.js";

const PAGE = 50;
const LONG = 2000; // characters of a value shown (the export has it whole)

function cut(value) {
  const s = text(value);
  return s.length > LONG ? `${s.slice(0, LONG)}… (${num(s.length)} characters)` : s;
}

function itemCard(item) {
  // the URL is the card's head: its field is not shown again when it is the same
  const fields = Object.entries(item.document || {}).filter(([k, v]) => !(k === "url" && v === item.url));
  return h("article", { class: "item stored-item", "data-key": item.key },
    h("div", { class: "item-head" },
      h("span", { class: "item-url" }, item.url ? link(item.url) : "(no URL)"),
      h("span", { class: "muted", title: "when it was stored (UTC)" }, `stored ${item.stored_at}`)),
    h("div", { class: "muted item-meta" }, `key ${item.key} · ${item.item_type}${item.entry ? ` · entry ${item.entry}` : ""}`),
    h("dl", {}, fields.map(([k, v]) => [h("dt", {}, k), h("dd", {}, k === "url" ? link(v) : cut(v))])));
}

export function itemsPage(job) {
  const enc = encodeURIComponent(job);
  const source = h("select", { id: "items-source", name: "source", "aria-label": "where to read items" },
    h("option", { value: "sql" }, "SQL store"),
    h("option", { value: "stream" }, "Redis stream (not moved yet)"));
  const q = h("input", { id: "items-q", name: "q", type: "search", placeholder: "URL contains…", maxlength: 500, size: 28 });
  const field = h("input", { id: "items-field", name: "field", placeholder: "field", maxlength: 100, size: 10, pattern: "[A-Za-z0-9_][A-Za-z0-9_\\-]*" });
  const value = h("input", { id: "items-value", name: "value", placeholder: "is this value", maxlength: 1000, size: 14 });
  const form = h("form", { class: "inline", id: "items-form" }, source, q, field, value, h("button", { type: "submit", class: "primary" }, "Search"));
  const exports = h("div", { class: "buttons", id: "items-export" });
  const info = h("div", { id: "items-info" });
  const list = h("div", { id: "items-list" });
  const more = h("button", { type: "button", id: "items-more", hidden: true }, "Older items");
  fill(view,
    h("h1", {}, "Items of job ", h("a", { href: `#/job/${enc}`, id: "items-job" }, job)),
    form, exports, info, list, h("div", { class: "buttons" }, more));
  connect({});

  let filters = new URLSearchParams(); // of the search shown (paging and export keep them)
  let cursor = null;
  let shown = 0;
  let busy = false;

  function readForm() {
    const p = new URLSearchParams({ source: source.value });
    if (q.value.trim()) p.set("q", q.value.trim());
    if (field.value.trim() || value.value) { p.set("field", field.value.trim()); p.set("value", value.value); }
    return p;
  }

  function exportLinks() {
    fill(exports, [["jsonl", "JSON lines"], ["csv", "CSV"]].map(([format, label]) => {
      const p = new URLSearchParams(filters);
      p.set("format", format);
      return h("a", { class: "button-link", href: `/api/v1/jobs/${enc}/items/export?${p}`, download: "", "data-export": format }, `Export ${label}`);
    }));
  }

  async function load(fresh) {
    if (busy) return;
    busy = true;
    more.disabled = true;
    const p = new URLSearchParams(filters);
    p.set("limit", String(PAGE));
    if (!fresh && cursor) p.set("cursor", cursor);
    try {
      const page = await api("GET", `/api/v1/jobs/${enc}/items?${p}`);
      if (fresh) { list.replaceChildren(); shown = 0; }
      for (const item of page.items) list.append(itemCard(item));
      shown += page.items.length;
      cursor = page.next_cursor;
      more.hidden = cursor === null;
      const where = Object.entries(page.store).filter(([k]) => k !== "store").map(([k, v]) => `${k} ${v}`).join(", ");
      fill(info,
        h("p", { class: "muted", "data-figure": "items-shown" },
          `${num(shown)} item(s) shown, newest first${cursor ? "" : " (all)"} · read from the ${page.source === "sql" ? "SQL store" : "Redis stream"}: ${where}`
          + (page.malformed ? ` · ${num(page.malformed)} malformed entries skipped` : "")),
        page.notes.map((note) => h("p", { class: "warning" }, note)));
      if (!shown) list.append(h("div", { class: "empty" }, "No item matches."));
    } catch (err) {
      fill(info, h("p", { class: "error-text" }, err.message));
      if (fresh) list.replaceChildren();
      more.hidden = true;
    } finally {
      busy = false;
      more.disabled = false;
    }
  }

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    filters = readForm();
    cursor = null;
    exportLinks();
    load(true);
  });
  more.addEventListener("click", () => load(false));
  filters = readForm();
  exportLinks();
  load(true);
  return {};
}
