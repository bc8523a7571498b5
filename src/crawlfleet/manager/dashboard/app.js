// crawlfleet dashboard: one page drawn from the manager's API (/session, /api/v1/...),
// kept live by server-sent events (/api/v1/live): sign-in and routing. Everything that
// comes from the API, crawled pages included, enters the page as text (dom.js).

import { act, api, disconnect, hooks, session } from "./core.js";
import { campaignPage, campaignsPage } from "./campaigns.js";
import { alertsPage, proxiesPage, scrapydPage, timersPage } from "./lists.js";
import { banner, fill, h, view } from "./dom.js";
import { itemsPage } from "./items.js";
import { jobPage, nodesPage, overviewPage } from "./pages.js";
import { logPage, runsPage } from "./runs.js";

// -- sign-in ---------------------------------------------------------------------------
function signedOut(message) {
  if (session.me === null && document.getElementById("login")) return; // already there: keep what is typed
  session.me = null;
  disconnect();
  if (session.page && session.page.leave) session.page.leave();
  session.page = null;
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
      session.me = await api("POST", "/session", { token: input.value });
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
    session.me = await response.json();
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
  fill(document.getElementById("who-name"), h("span", { id: "live-dot", class: "live-dot", title: "live updates" }), " ", session.me.name, ` (${session.me.role})`);
  route();
}

document.getElementById("sign-out").addEventListener("click", async () => {
  await act("sign out", "DELETE", "/session");
  signedOut("Signed out.");
});

// -- routing ---------------------------------------------------------------------------
// A page of a named thing: #/job/NAME, #/job/NAME/runs, #/job/NAME/log/ID, #/campaign/NAME
// (names are URI-encoded: a job name never holds "/").
function named(part) {
  try { return decodeURIComponent(part); } catch { return null; }
}

function page(hash) {
  const job = hash.match(/^#\/job\/([^/]+)(?:\/(runs|items|log\/(\d+)))?$/);
  const jobName = job && named(job[1]);
  if (jobName !== null) {
    if (job[2] === "runs") return runsPage(jobName);
    if (job[2] === "items") return itemsPage(jobName);
    if (job[3]) return logPage(jobName, Number(job[3]));
    return jobPage(jobName);
  }
  const campaign = hash.match(/^#\/campaign\/([^/]+)$/);
  const campaignName = campaign && named(campaign[1]);
  if (campaignName !== null) return campaignPage(campaignName);
  const pages = {
    "#/nodes": nodesPage, "#/scrapyd": scrapydPage, "#/campaigns": campaignsPage,
    "#/proxies": proxiesPage, "#/timers": timersPage, "#/alerts": alertsPage,
  };
  return (pages[hash] || overviewPage)();
}

let ticker = null;
function route() {
  if (!session.me) return;
  const hash = location.hash || "#/";
  for (const a of document.querySelectorAll("#nav a")) {
    const href = a.getAttribute("href");
    a.classList.toggle("active", href === hash || (href !== "#/" && hash.startsWith(`${href.replace(/s$/, "")}/`)));
  }
  if (session.page && session.page.leave) session.page.leave();
  session.page = page(hash);
  if (ticker) clearInterval(ticker);
  ticker = setInterval(() => { if (session.page && session.page.tick) session.page.tick(); }, 5000);
}

hooks.signedOut = signedOut;
hooks.lost = checkSession;
window.addEventListener("hashchange", route);
checkSession();
