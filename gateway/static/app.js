// turnstream playground: the page's controller -- the API key, the settings, the composer,
// the session id in the address, and the page's state.  No build step: ES modules, plain DOM.
//
// Page states (body[data-state], the header pill): idle · starting (request sent, no reply
// yet) · loading (rebuilding a session from its log) · running · done · stopped (turn limit)
// · cancelled · failed · error (a request was refused: nothing ran).
"use strict";

import { request } from "./api.js";
import { ROUTES } from "./routes.js";
import { el } from "./turn.js";
import { Transcript, sessionEnd } from "./view.js";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "turnstream-key";
const BUSY = new Set(["starting", "running", "loading"]);
const NO_RESULT = "(no result: the user did not run this tool)";

const page = { route: "session", client: null, tools: [], bubble: null, sent: "", resumeSid: null,
               view: new Transcript($("log"), $("totals")) };

// ------------------------------------------------------------------ page state
function setState(state, label) {
  document.body.dataset.state = state;
  $("status").textContent = label || state;
  const working = BUSY.has(state);
  $("send").disabled = working;
  $("cancel").disabled = !(state === "starting" || state === "running");
  for (const r of document.querySelectorAll("input[name=route]")) r.disabled = working;
  lockSettings();
}
const busy = () => BUSY.has(document.body.dataset.state);

/** What a follow-up cannot change is shown locked while a session exists; what a route
 *  ignores is shown disabled. */
function lockSettings() {
  const route = ROUTES[page.route];
  const fixed = route.locksSettings && Boolean(page.client && page.client.sid);
  $("fixed").disabled = fixed; $("fixed-note").hidden = !fixed;
  $("max-turns").disabled = !route.maxTurns; $("turns-note").hidden = route.maxTurns;
}

function banner(text) { $("banner").textContent = text || ""; $("banner").hidden = !text; }

function openSettings(open) {
  document.body.classList.toggle("settings-open", open);
  $("settings-toggle").setAttribute("aria-expanded", String(open));
}

/** The address names the session (and the route when it is not the session API). */
function setUrl(sid) {
  const u = new URL(location.href);
  u.search = "";
  if (sid) u.searchParams.set("session", sid);
  if (page.route !== "session") u.searchParams.set("api", page.route);
  history.replaceState(null, "", u);
}

// ------------------------------------------------------------------ the key and the tools
const key = () => $("key").value.trim();

function keyHint(text, tone) { $("key-hint").textContent = text; $("key-hint").dataset.tone = tone || ""; }

/** Ask the server for its tools with the key: that also says whether the key is needed, and good. */
async function checkKey() {
  try {
    page.tools = (await request("/v1/tools", key())).data;
    showTools(page.tools);
    keyAccepted();
  } catch (e) {
    keyProblem(e);
  }
}

function keyAccepted() {
  $("key").removeAttribute("aria-invalid");
  if (key()) {
    localStorage.setItem(KEY_STORE, key());
    keyHint("Key accepted (saved in this browser).", "ok");
  } else {
    $("key").placeholder = "not needed (open mode)";
    keyHint("This server runs in open mode: no key needed.", "");
  }
  if (page.resumeSid) resume(page.resumeSid);
}

function keyProblem(e) {
  if (!e.badKey) {
    $("tools").textContent = "could not load the tools: " + e.message;
    if (page.resumeSid) resumeFailed(page.resumeSid, e);
    return;
  }
  $("key").placeholder = "required by this server";
  $("tools").textContent = "the tools load once the key is accepted";
  if (key()) keyRejected(e);
  else { keyHint("This server requires an API key.", "warn"); openSettings(true); }
  if (page.resumeSid) resumeFailed(page.resumeSid, e);
}

function keyRejected(e) {
  $("key").setAttribute("aria-invalid", "true");
  keyHint(key() ? `The server rejected this key (${e.message}); it was not saved.` : "This server requires an API key.",
          "error");
  if (localStorage.getItem(KEY_STORE) === key()) localStorage.removeItem(KEY_STORE);
  openSettings(true);
}

function showTools(tools) {
  const was = new Map([...$("tools").querySelectorAll("input")].map((b) => [b.value, b.checked]));
  $("tools").replaceChildren(...tools.map((t) => {
    const label = el("label");
    const box = el("input");
    box.type = "checkbox"; box.value = t.function.name; box.checked = was.get(t.function.name) ?? true;
    label.append(box, t.function.name);
    label.title = t.function.description || "";
    return label;
  }));
}

// ------------------------------------------------------------------ sending
function settings() {
  const names = [...$("tools").querySelectorAll("input:checked")].map((b) => b.value);
  const replay = $("replay").value.trim();
  return { maxTurns: +$("max-turns").value || undefined, maxTokens: +$("max-tokens").value || 512, tools: names,
           toolDefs: page.tools.filter((t) => names.includes(t.function.name)),
           replay: replay ? JSON.parse(replay) : null };
}

/** Chat completions: results typed for the calls the last reply returned. */
function pendingResults() {
  if (!page.client.pendingCalls) return [];
  return page.client.pendingCalls().map((c) => ({ id: c.id, content: page.view.answer(c.turn, c.index) || NO_RESULT }));
}

async function send(ev) {
  if (ev) ev.preventDefault();
  if (busy()) return;
  const text = $("message").value.trim();
  const results = pendingResults();
  if (!text && !results.length) return;
  let s;
  try { s = settings(); } catch (e) { banner("The replay script is not valid JSON: " + e.message); return; }
  banner("");
  page.view.lockAnswers();
  page.bubble = text ? page.view.user(text, performance.now()) : page.view.note("tool results sent back");
  page.sent = text;
  $("message").value = "";
  setState("starting", "starting…");
  const client = page.client;
  try {
    await client.send(text, s, key(), results);
  } catch (e) {
    if (client === page.client) sendFailed(e); // else the page moved on (New session, another route)
  }
}

function sendFailed(e) {
  if (e.name === "AbortError") {
    page.view.note("cancelled before the reply began");
    setState("cancelled", "cancelled");
    return;
  }
  if (isUserBubble(page.bubble)) page.view.failed(page.bubble, e.message);
  if (!$("message").value) $("message").value = page.sent;
  if (e.badKey) {
    keyRejected(e);
    setState("error", key() ? "key rejected" : "key required");
    banner(`Not sent: ${key() ? "the server rejected the API key" : "this server requires an API key"} ` +
           `(${e.message}). Enter a valid key in Settings, then send again.`);
    return;
  }
  setState("error", "not sent");
  banner("Not sent: " + e.message);
}
const isUserBubble = (node) => node && node.classList.contains("user");

async function cancel() {
  if (!busy()) return;
  $("cancel").disabled = true;
  try {
    await page.client.cancel(key());
  } catch (e) {
    banner("Cancel failed: " + e.message);
    $("cancel").disabled = false;
  }
}

// ------------------------------------------------------------------ what the route reports
const END_LABEL = { done: "done", stopped: "stopped: turn limit", cancelled: "cancelled", failed: "failed" };

const hooks = {
  session(sid) { setUrl(sid); page.view.session(sid, location.href); lockSettings(); },
  opened() { setState("running", "running"); },
  event(ev) { page.view.apply(ev); },
  ended(reason) {
    const [state] = sessionEnd(reason);
    setState(state, END_LABEL[state] || state);
  },
  history(frames, info, done) {
    page.view.note(`rebuilt from the server's event log: ${frames.length} events`);
    page.view.replay(frames, info.messages.filter((m) => m.role === "user").map((m) => m.content), !done);
    if (!done) setState("running", "following live");
  },
  lost(message) {
    banner(`Connection lost: ${message}. Reload the page to rebuild the session from its event log.`);
    setState("failed", "connection lost");
  },
};

function newSession() {
  if (page.client && busy()) page.client.cancel(key()).catch(() => {});
  if (page.client) page.client.close();
  page.client = new ROUTES[page.route].client(hooks);
  page.view.reset();
  banner("");
  setUrl(null);
  setState("idle");
}

/** The same message can be sent again through another route: the composer keeps it. */
function switchRoute(name) {
  page.route = name;
  $("route-about").textContent = ROUTES[name].about;
  const last = page.sent;
  newSession();
  if (!$("message").value && last) $("message").value = last;
}

// ------------------------------------------------------------------ a session from the address
async function resume(sid) {
  page.resumeSid = sid;
  banner("");
  setState("loading", "loading session…");
  try {
    const info = await page.client.resume(sid, key());
    page.resumeSid = null;
    for (const box of $("tools").querySelectorAll("input")) box.checked = info.tools.includes(box.value);
  } catch (e) {
    if (e.badKey) keyProblem(e);
    else resumeFailed(sid, e);
  }
}

function resumeFailed(sid, e) {
  if (e.badKey) {
    setState("error", "key required");
    banner(`Session ${sid} needs the API key that created it: enter it in Settings.`);
    return;
  }
  page.resumeSid = null;
  setState("error", "not found");
  banner(e.status === 404 ? `Session ${sid} was not found: it expired, or it belongs to another API key.`
    : `Could not open session ${sid}: ${e.message}`);
}

// ------------------------------------------------------------------ start
function bind() {
  $("composer").addEventListener("submit", send);
  $("message").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) send(e); // Enter, Ctrl+Enter, Cmd+Enter
  });
  $("cancel").addEventListener("click", cancel);
  $("new").addEventListener("click", newSession);
  $("key").addEventListener("change", checkKey);
  $("key").addEventListener("input", () => $("key").removeAttribute("aria-invalid"));
  $("settings-toggle").addEventListener("click",
    () => openSettings(!document.body.classList.contains("settings-open")));
}

/** The API switch, one radio per route. */
function routeSwitch(current) {
  $("routes").replaceChildren(...Object.entries(ROUTES).map(([name, route]) => {
    const label = el("label");
    const radio = el("input");
    Object.assign(radio, { type: "radio", name: "route", value: name, checked: name === current });
    radio.addEventListener("change", () => { if (radio.checked) switchRoute(name); });
    label.append(radio, " " + route.label);
    return label;
  }));
}

async function start() {
  const params = new URLSearchParams(location.search);
  const route = ROUTES[params.get("api")] ? params.get("api") : "session";
  routeSwitch(route);
  page.route = route;
  $("route-about").textContent = ROUTES[route].about;
  $("key").value = localStorage.getItem(KEY_STORE) || "";
  page.client = new ROUTES[route].client(hooks);
  bind();
  setState("idle");
  const sid = ROUTES[route].resumable && params.get("session");
  if (sid) { page.resumeSid = sid; $("message").value = ""; } // resumed once the key is known to be good
  await checkKey();
}

start();
