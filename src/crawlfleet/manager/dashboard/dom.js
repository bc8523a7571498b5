// crawlfleet dashboard: building the page. Everything goes in as text nodes or
// attribute values (never parsed as HTML); links are made only of http(s) URLs.

export const view = document.getElementById("view");
const toastBox = document.getElementById("toast");
const confirmDialog = document.getElementById("confirm");

export function h(tag, attrs, ...children) {
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

export function svg(tag, attrs) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  return el;
}

export function fill(el, ...children) {
  el.replaceChildren();
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function toast(message, bad = false) {
  const el = h("div", { class: bad ? "bad" : "" }, message);
  toastBox.append(el);
  setTimeout(() => el.remove(), bad ? 8000 : 4000);
}

export function banner(message) {
  // One line over the page while something is wrong (not a toast a second).
  const el = document.getElementById("banner");
  if ((el.textContent || "") !== message) fill(el, message);
  el.hidden = !message;
}

export function ask(question) {
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
export function num(value, digits = 0) {
  if (value === null || value === undefined || Number.isNaN(Number(value))) return "–";
  return nf.format(Number(Number(value).toFixed(digits)));
}
export function duration(seconds) {
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
export function bytes(value) {
  if (typeof value !== "number") return "–";
  return value >= 1 << 30 ? `${(value / (1 << 30)).toFixed(1)} GiB` : `${Math.round(value / (1 << 20))} MiB`;
}
export function text(value) {
  if (value === null || value === undefined) return "–";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}
export function badge(state) {
  // a state's first word is its colour: "waiting for the item store" is a waiting one
  const word = String(state).split(" ")[0];
  const known = /^[a-z_]+$/.test(word) ? word : "";
  return h("span", { class: `badge ${known}` }, text(state));
}
export function link(url) {
  const s = String(url);
  return /^https?:\/\//i.test(s) ? h("a", { href: s, rel: "noopener noreferrer", target: "_blank" }, s) : s;
}

// -- a line chart (SVG built node by node) -------------------------------------------
export function chart(points, label, width) {
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
export function table(rows, columns, empty = "Nothing yet.") {
  if (!rows || !rows.length) return h("div", { class: "empty" }, empty);
  return h("div", { class: "table-wrap" }, h("table", {},
    h("thead", {}, h("tr", {}, columns.map(([title, , cls]) => h("th", { class: cls || "" }, title)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell, cls]) => {
      const value = cell(row);
      return h("td", { class: cls || "" }, value instanceof Node ? value : text(value));
    }))))));
}

export function card(label, value, id) {
  return h("div", { class: "card" }, h("div", { class: "label" }, label), h("div", { class: "value", "data-figure": id || label }, value));
}

export function progressBar(share, big = false) {
  return h("div", { class: `progress${big ? " progress-big" : ""}`, role: "progressbar", "aria-valuenow": Math.round(share * 100), "aria-valuemin": 0, "aria-valuemax": 100 },
    h("div", { style: null, "data-width": share }));
}

export function sizeBars(root) {
  // widths set from script (the CSP allows no inline style attribute in the markup)
  for (const bar of root.querySelectorAll("[data-width]")) bar.style.width = `${(Number(bar.dataset.width) * 100).toFixed(1)}%`;
}
