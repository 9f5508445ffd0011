// One client per API route.  Each speaks its route's wire format and hands the page session
// events ({turn, ts, body: {type, ...}}, the session API's own shape), so view.js draws every
// route alike.  A new streamed route (e.g. POST /v1/responses) is a translator (start(),
// feed(json, eventName), finish() -> events; see ChatTranslator), a StreamClient subclass
// (prepare, keep), and an entry in ROUTES; the page builds its switch from ROUTES.
//
// Client interface: send(text, settings, key) · cancel(key) · close(), and for routes whose
// sessions live on the server, resume(sid, key).  Hooks the page gives a client:
// event(ev) · ended(reason) · opened() · session(sid) · history(frames, info) · lost(message).
"use strict";

import { ApiError, newer, openSocket, request, streamEvents } from "./api.js";

const RETRIES = 5;
/** The hooks of a client the page has let go of: whatever it still hears goes nowhere. */
const DETACHED = { event() {}, ended() {}, opened() {}, session() {}, history() {}, lost() {} };

// ------------------------------------------------------------------ the session API
/** ``POST /v1/sessions`` (+ ``/messages`` for a follow-up), events over the session's WebSocket. */
export class SessionClient {
  constructor(hooks) {
    this.hooks = hooks;
    Object.assign(this, { sid: null, ws: null, lastId: "0-0", endTurn: 0, done: true, retries: 0, cancelWanted: false });
  }

  async send(text, s, key) {
    if (this.sid) return this.followUp(text, s, key);
    const body = { messages: [{ role: "user", content: text }], max_turns: s.maxTurns, max_tokens: s.maxTokens,
                   tools: s.tools };
    if (s.replay) body.replay = s.replay;
    const r = await request("/v1/sessions", key, body);
    this.sid = r.id;
    this.hooks.session(r.id);
    if (this.cancelWanted) await this.cancel(key); // Cancel was pressed before the id was known
    if (this.hooks !== DETACHED) this.follow("0-0", 0, key);
  }

  async followUp(text, s, key) {
    const r = await request(`/v1/sessions/${this.sid}/messages`, key, { content: text, max_turns: s.maxTurns });
    this.follow(r.after, r.turn, key);
  }

  /** Rebuild a session from its event log, then follow it live if it still runs. */
  async resume(sid, key) {
    const info = await request(`/v1/sessions/${encodeURIComponent(sid)}`, key);
    this.sid = sid;
    this.hooks.session(sid);
    this.replay = { until: info.last_event_id || "0-0", frames: [], info };
    this.follow("0-0", info.turn, key);
    if (!info.last_event_id) this.flushReplay(); // nothing logged yet
    return info;
  }

  follow(after, turn, key) {
    Object.assign(this, { lastId: after, endTurn: turn, done: false, key });
    const ws = openSocket(this.sid, after, key);
    this.ws = ws;
    ws.onopen = () => { this.retries = 0; if (!this.replay) this.hooks.opened(); };
    ws.onmessage = (m) => this.onFrame(JSON.parse(m.data));
    ws.onclose = (c) => this.onClose(ws, c);
  }

  onFrame(f) {
    if (!f.body) {
      if (f.type === "error") this.hooks.event({ turn: 0, ts: Date.now() / 1000, body: { type: "error", ...f.error } });
      return;
    }
    if (!newer(f.id, this.lastId)) return; // already shown (the server sends each event once)
    this.lastId = f.id;
    const last = f.body.type === "session.ended" && f.turn >= this.endTurn;
    if (last) this.done = true;
    if (this.replay) {
      this.replay.frames.push(f);
      if (!newer(this.replay.until, f.id) || last) this.flushReplay();
    } else {
      this.hooks.event(f);
    }
    if (last) this.hooks.ended(f.body.reason);
  }

  flushReplay() {
    const { frames, info } = this.replay;
    this.replay = null;
    this.hooks.history(frames, info, this.done);
  }

  /** An unexpected close resumes after the last event received (a rebuild keeps collecting). */
  onClose(ws, c) {
    if (ws !== this.ws || this.done) return;
    if (this.retries++ >= RETRIES) {
      if (this.replay) this.flushReplay();
      this.hooks.lost(`the event stream closed (${c.code}) and did not come back`);
      return;
    }
    setTimeout(() => { if (ws === this.ws) this.follow(this.lastId, this.endTurn, this.key); }, 300 * this.retries);
  }

  async cancel(key) {
    if (!this.sid) { this.cancelWanted = true; return; }
    this.cancelWanted = false;
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type: "cancel" }));
    else await request(`/v1/sessions/${this.sid}/cancel`, key, {});
  }

  close() {
    const ws = this.ws;
    Object.assign(this, { ws: null, done: true, hooks: DETACHED });
    if (ws) ws.close();
  }
}

// ------------------------------------------------------------------ chat completions
/** Chunks of one streamed ``chat.completion`` as the session events of turn ``turn``. */
export class ChatTranslator {
  constructor(turn) {
    Object.assign(this, { turn, calls: new Map(), content: "", finishReason: "stop", usage: null, begun: false });
  }

  ev(type, fields) { return { turn: this.turn, ts: Date.now() / 1000, body: { type, ...fields } }; }

  /** The server accepted the request: the turn starts (its prompt size comes with the usage). */
  start() {
    this.begun = true;
    return [this.ev("turn.started", { prompt_tokens: 0, cached_tokens: 0, worker: "chat completion" })];
  }

  feed(chunk) {
    const out = [];
    for (const choice of chunk.choices || []) {
      out.push(...this.delta(choice.delta || {}));
      if (choice.finish_reason) this.finishReason = choice.finish_reason;
    }
    if (chunk.usage) {
      this.usage = chunk.usage;
      const cached = (chunk.usage.prompt_tokens_details || {}).cached_tokens || 0;
      out.push(this.ev("turn.usage", { prompt_tokens: chunk.usage.prompt_tokens, cached_tokens: cached }));
    }
    return out;
  }

  delta(d) {
    const out = [];
    if (d.reasoning_content) out.push(this.ev("reasoning.delta", { text: d.reasoning_content }));
    if (d.content) { this.content += d.content; out.push(this.ev("content.delta", { text: d.content })); }
    for (const tc of d.tool_calls || []) {
      const fn = tc.function || {};
      if (!this.calls.has(tc.index)) {
        this.calls.set(tc.index, { id: tc.id, name: fn.name, arguments: "" });
        out.push(this.ev("tool_call.begin", { index: tc.index, id: tc.id, name: fn.name }));
      }
      if (fn.arguments) {
        this.calls.get(tc.index).arguments += fn.arguments;
        out.push(this.ev("tool_call.args", { index: tc.index, delta: fn.arguments }));
      }
    }
    return out;
  }

  /** After ``[DONE]``: the calls as returned, the turn's end, the exchange's end. */
  finish() {
    const out = [];
    for (const [index, c] of this.calls) {
      out.push(this.ev("tool_call.ready", { index, id: c.id, name: c.name, arguments: c.arguments }),
               this.ev("tool_call.returned", { index }));
    }
    out.push(this.ev("turn.ended", { finish_reason: this.finishReason, n_calls: this.calls.size,
                                    completion_tokens: (this.usage || {}).completion_tokens || 0 }));
    out.push(this.ev("session.ended", { reason: this.calls.size ? "tool_calls" : "stop" }));
    return out;
  }

  /** The assistant message for the conversation's history. */
  message() {
    const m = { role: "assistant", content: this.content || null };
    if (this.calls.size) {
      m.tool_calls = [...this.calls.values()].map((c) => ({ id: c.id, type: "function",
        function: { name: c.name, arguments: c.arguments } }));
    }
    return m;
  }
}

/** A route answering each request with one SSE stream.  A subclass says what to send
 *  (``prepare`` -> {path, body, translator}) and what the answer leaves behind (``keep``); its
 *  translator's ``start()``, ``feed(json, eventName)`` and ``finish()`` return session events. */
class StreamClient {
  constructor(hooks) {
    this.hooks = hooks;
    Object.assign(this, { history: [], turn: 0, abort: null, model: null, pending: [] });
  }

  /** Calls of the last reply still waiting for a result: [{turn, index, id}]. */
  pendingCalls() { return this.pending; }

  async send(text, s, key, results = []) {
    this.model = this.model || (await request("/v1/models", key)).data[0].id;
    const { path, body, translator: t } = this.prepare(text, s, results);
    this.abort = new AbortController();
    try {
      await this.stream(path, body, key, t);
    } catch (e) {
      if (!t.begun) throw e; // refused (or cancelled) before anything streamed: the page says why
      const cancelled = e.name === "AbortError";
      this.emitAll([...(cancelled ? [] : [t.ev("error", { message: e.message })]),
                    t.ev("session.ended", { reason: cancelled ? "cancelled" : "error" })]);
      return;
    } finally { this.abort = null; }
    this.keep(body, t);
    this.pending = [...t.calls.entries()].map(([index, c]) => ({ turn: this.turn, index, id: c.id }));
    this.turn += 1;
  }

  async stream(path, body, key, t) {
    for await (const { event, data } of streamEvents(path, key, body, this.abort.signal)) {
      if (!t.begun) { this.hooks.opened(); this.emitAll(t.start()); }
      if (data === "[DONE]") break;
      const obj = JSON.parse(data);
      if (obj.error) throw new ApiError(500, obj.error.message, obj.error.code);
      this.emitAll(t.feed(obj, event));
    }
    this.emitAll(t.finish());
  }

  emitAll(events) {
    for (const ev of events) {
      this.hooks.event(ev);
      if (ev.body.type === "session.ended") this.hooks.ended(ev.body.reason);
    }
  }

  async cancel() { if (this.abort) this.abort.abort(); }
  close() {
    this.hooks = DETACHED;
    if (this.abort) this.abort.abort();
  }
}

/** ``POST /v1/chat/completions``, streamed; the conversation is kept here and re-sent each time.
 *  The model's calls are returned, never run: their results go back as ``role: "tool"`` messages. */
export class ChatClient extends StreamClient {
  prepare(text, s, results) {
    const messages = [...this.history, ...results.map((r) => ({ role: "tool", tool_call_id: r.id, content: r.content }))];
    if (text) messages.push({ role: "user", content: text });
    const body = { model: this.model, messages, stream: true, stream_options: { include_usage: true },
                   max_tokens: s.maxTokens };
    if (s.toolDefs.length) body.tools = s.toolDefs;
    if (s.replay) body.replay = s.replay;
    return { path: "/v1/chat/completions", body, translator: new ChatTranslator(this.turn) };
  }

  keep(body, t) { this.history = [...body.messages, t.message()]; }
}

/** The routes the page can switch between.  ``resumable``: its sessions live on the server and
 *  ``?session=ID`` rebuilds one; ``locksSettings``: a follow-up keeps the first request's tools
 *  and max tokens; ``maxTurns``: it honours max turns. */
export const ROUTES = {
  session: { label: "Session API", client: SessionClient, resumable: true, locksSettings: true, maxTurns: true,
             about: "Session API: the server runs the agent loop and its tools; every event is logged and replayable." },
  chat: { label: "Chat Completions", client: ChatClient, resumable: false, locksSettings: false, maxTurns: false,
          about: "OpenAI chat completions: one turn per request; the model's tool calls come back to you, " +
                 "never run. The conversation lives in this page only." },
};
