// The wire: JSON requests, Server-Sent Events over fetch, and session WebSockets, each with
// the API key (a Bearer header; on a WebSocket the subprotocol bearer.KEY or ?token=).
"use strict";

/** A refused or failed request: ``status`` 0 when the server could not be reached. */
export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status; this.code = code || "";
  }
  get badKey() { return this.status === 401; }
}

function headers(key) {
  const h = { "Content-Type": "application/json" };
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

async function call(path, key, body, signal) {
  const init = { headers: headers(key), signal };
  if (body !== undefined) Object.assign(init, { method: "POST", body: JSON.stringify(body) });
  try {
    return await fetch(path, init);
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, "the server could not be reached (" + e.message + ")");
  }
}

async function failure(resp) {
  const data = await resp.json().catch(() => ({}));
  const err = data.error || {};
  return new ApiError(resp.status, err.message || resp.statusText || "HTTP " + resp.status, err.code);
}

/** GET (no body) or POST JSON; the parsed reply, or an ApiError. */
export async function request(path, key, body, signal) {
  const resp = await call(path, key, body, signal);
  if (!resp.ok) throw await failure(resp);
  return resp.json();
}

/** POST JSON and read the reply as SSE: yields {event, data} (``event`` "message" when unnamed). */
export async function* streamEvents(path, key, body, signal) {
  const resp = await call(path, key, body, signal);
  if (!resp.ok) throw await failure(resp);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut); buf = buf.slice(cut + 2);
      const ev = parseBlock(block);
      if (ev) yield ev;
    }
  }
}

function parseBlock(block) {
  let event = "message"; const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  return data.length ? { event, data: data.join("\n") } : null;
}

/** The session's event WebSocket, from the event after ``after``. */
export function openSocket(sid, after, key) {
  const protocols = ["turnstream.v1"];
  let url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/sessions/${sid}/ws?after=${after}`;
  if (key && /^[A-Za-z0-9._~-]+$/.test(key)) protocols.push("bearer." + key);
  else if (key) url += "&token=" + encodeURIComponent(key);
  return new WebSocket(url, protocols);
}

/** Is stream id ``id`` ("ms-seq") later than ``than``? */
export function newer(id, than) {
  const [a, b] = id.split("-").map(Number), [c, d] = than.split("-").map(Number);
  return a > c || (a === c && b > d);
}
