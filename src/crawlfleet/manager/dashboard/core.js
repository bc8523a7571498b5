// crawlfleet dashboard: the session, the API, and the live stream of events.

import { banner, toast } from "./dom.js";

/** Who is signed in ({name, role, csrf}) and the page shown ({update(event, data), tick()}). */
export const session = { me: null, page: null };
/** What app.js does when the session ends (signedOut) or the manager is lost (lost). */
export const hooks = { signedOut: () => {}, lost: () => {} };
let source = null; // the EventSource of the page shown
export const series = new Map(); // job -> [[time ms, pages/s]], the charts' points
const SERIES_MAX = 3600;
const ROLES = ["viewer", "operator", "admin"];

export function disconnect() {
  if (source) source.close();
  source = null;
}

export function can(role) {
  return session.me !== null && ROLES.indexOf(session.me.role) >= ROLES.indexOf(role);
}

// -- the API ---------------------------------------------------------------------------
export async function api(method, path, body) {
  const init = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  if (method !== "GET" && session.me) init.headers["X-CSRF-Token"] = session.me.csrf;
  const response = await fetch(path, init);
  let data = null;
  try { data = await response.json(); } catch { data = null; }
  if (response.status === 401 && path !== "/session") {
    hooks.signedOut("Your session has ended: sign in again.");
  }
  if (!response.ok) {
    const message = data && data.error ? data.error.message : `${response.status} ${response.statusText}`;
    throw new Error(message);
  }
  return data;
}

export async function act(what, method, path, body) {
  try {
    const result = await api(method, path, body);
    return result;
  } catch (err) {
    toast(`${what}: ${err.message}`, true);
    return null;
  }
}

// -- live events -----------------------------------------------------------------------
export function connect(params) {
  disconnect();
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
      setTimeout(() => { if (source === mine) hooks.lost(); }, 3000);
    }
  });
  for (const name of ["fleet", "job", "nodes", "unavailable", "end"]) {
    source.addEventListener(name, (e) => {
      let data;
      try { data = JSON.parse(e.data); } catch { return; }
      if (name === "fleet") { noteFleet(data); banner(""); }
      if (name === "unavailable") banner(`${data.message}: the figures shown are the last ones received.`);
      if (name === "end" && data.reason !== "max_seconds") { source.close(); hooks.lost(); return; }
      if (session.page && session.page.update) session.page.update(name, data);
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

export function fleetSeries() {
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
