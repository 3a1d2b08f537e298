// The Lazarus web console: plain JavaScript over the /v1/ API of the same
// server. The bearer token is kept in this tab's sessionStorage and sent in
// the Authorization header of every request, event streams included (they
// are read with fetch, not EventSource, which cannot send headers). Every
// piece of data is written with textContent, never as HTML.
'use strict';

const TOKEN_KEY = 'lazarus.console.token';
const API = '../v1/';            // relative: the console works under a prefix
const POLL_MS = 10000;           // the queue's refresh period
const CONTEXT_EVENTS = 6;        // events of conversation context per call
const QUEUE_CALLS = 100;         // the queue reads pages of calls until it holds this many
const QUEUE_PAGES = 10;          // or has read this many pages
const GONE = 'This call is gone (its conversation was deleted, or it is no longer visible to you).';
const ENDED = 'This call can no longer be answered: its conversation has ended.';
// MAX_RESULT_BYTES is the server's bound on an answer (agent.MaxResultBytes):
// the UTF-8 bytes of a rejection's reason, or of an approval's result as
// JSON. A longer answer is refused here, before it is sent, never cut.
const MAX_RESULT_BYTES = 512 * 1024;
// MAX_ERROR_BYTES is where the server cuts a rejection's reason when it
// records it (agent.MaxErrorBytes): the card says so of a longer one.
const MAX_ERROR_BYTES = 4 * 1024;
// answerTimeoutMS bounds the wait for the server's answer to an Approve or
// Reject, to the reads of its call that follow one, and to a message's
// send: twice the Runtime's default CallTimeout, after which the server
// answers 504 timeout itself. Past it, a write's outcome is unknown (it
// may have been recorded), and a read tells nothing. A let, not a const: a
// test sets it shorter.
let answerTimeoutMS = 60000;

const $ = (id) => document.getElementById(id);

// el builds an element: attributes (class, data-*, properties) and children
// (strings become text nodes).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-') || k === 'role' || k.startsWith('aria-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    e.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return e;
}

const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// api does one JSON request and returns the decoded answer, or throws an
// APIError with the server's code. A 401 signs out.
// A request given timeoutMS that gets no whole answer by then is given up
// (code no_answer).
async function api(method, path, body, timeoutMS) {
  const headers = { Authorization: 'Bearer ' + token(), Accept: 'application/json' };
  const init = { method, headers, cache: 'no-store', credentials: 'omit' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let timer = null;
  if (timeoutMS) {
    const abort = new AbortController();
    init.signal = abort.signal;
    timer = setTimeout(() => abort.abort(), timeoutMS);
  }
  const given = () => timer !== null && init.signal.aborted;
  const noAnswer = () => new APIError(0, 'no_answer', `no answer came within ${timeoutMS / 1000}s`);
  let res;
  let text;
  try {
    try {
      res = await fetch(API + path, init);
    } catch (e) {
      // No answer: a write may have reached the server all the same (the
      // connection cut after it was sent), so its outcome is unknown.
      throw given() ? noAnswer() : new APIError(0, 'network', 'the server cannot be reached');
    }
    if (res.status === 204) return null;
    try { text = await res.text(); } catch (e) { if (given()) throw noAnswer(); }
  } finally {
    clearTimeout(timer);
  }
  let data = null;
  try { data = JSON.parse(text, exactNumbers); } catch (e) { /* not JSON */ }
  if (!res.ok) {
    const err = (data && data.error) || {};
    if (res.status === 401) signOut('The token was refused.');
    // A body that is no API error (a proxy's page) says nothing, nor does
    // HTTP/2's empty status text: the status code is what is left.
    throw new APIError(res.status, err.code || 'http_' + res.status, err.message || res.statusText || 'HTTP ' + res.status);
  }
  return data;
}

// exactNumbers is the reviver of the API's answers: a number a JavaScript
// number cannot hold as written (12345678901234567891, 1.10) is kept as
// its text, which JSON.stringify writes back as it was, so a call's
// arguments show what the model wrote, not a rounded value (where the
// browser has JSON.rawJSON; elsewhere the number is as parsed).
function exactNumbers(key, value, context) {
  if (typeof value === 'number' && context && typeof context.source === 'string' &&
      String(value) !== context.source && typeof JSON.rawJSON === 'function') {
    return JSON.rawJSON(context.source);
  }
  return value;
}

const enc = encodeURIComponent;

// unknownOutcome reports whether a write that failed with e may have been
// done all the same: the server said so (unknown_outcome), no answer came
// (a network cut after the request went out, or none within the bound
// the request was given), or a gateway in front gave up waiting for the
// server's answer (a 504 that is no API error).
const unknownOutcome = (e) => ['unknown_outcome', 'network', 'no_answer', 'http_504'].includes(e.code);

// UNADDRESSABLE says why a conversation whose id is "." or ".." cannot be
// read here: a browser takes such a path segment (escaped or not) for a
// step of the path, so its requests would reach another route.
const UNADDRESSABLE = 'A browser cannot address a conversation whose id is "." or "..": read it over the API.';
const unaddressable = (id) => id === '.' || id === '..';

function randomID() {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

function ago(iso) {
  if (!iso) return '';
  const s = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return 'just now';
  if (s < 3600) return Math.floor(s / 60) + ' min ago';
  if (s < 86400) return Math.floor(s / 3600) + ' h ago';
  return new Date(iso).toLocaleString();
}

function duration(ms) {
  let s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${String(m).padStart(2, '0')}m`;
  return `${m}m ${String(s).padStart(2, '0')}s`;
}

function who(id) {
  if (!id || !id.user_id) return '';
  return id.roles && id.roles.length ? `${id.user_id} (${id.roles.join(', ')})` : id.user_id;
}

function pretty(raw) {
  try { return JSON.stringify(typeof raw === 'string' ? JSON.parse(raw) : raw, null, 2); } catch (e) { return String(raw); }
}

// ---- events -------------------------------------------------------------

const textOf = (parts) => (parts || []).map((p) => p.text !== undefined ? p.text : '[' + (p.image ? 'image' : 'file') + ']').join('');
const enumName = (v, prefix) => String(v || '').replace(prefix, '').toLowerCase();

// describe returns the kind, a headline and a body of one event (protobuf
// JSON with proto field names); with named agents, the headline names the
// agent the event belongs to (a handoff names both of its own).
function describe(ev) {
  const [kind, head, body] = describeBody(ev);
  return [kind, ev.agent && !ev.handoff ? `${head} [${ev.agent}]` : head, body];
}

function describeBody(ev) {
  if (ev.user_msg) return ['user_msg', 'user' + (ev.author ? ' ' + who(ev.author) : ''), textOf(ev.user_msg.content)];
  if (ev.assistant_msg) {
    const calls = (ev.assistant_msg.tool_calls || []).map((c) => `→ ${c.name}(${c.arguments || ''})`);
    return ['assistant_msg', 'assistant', [textOf(ev.assistant_msg.content), ...calls].filter(Boolean).join('\n')];
  }
  if (ev.tool_call) {
    const c = ev.tool_call.call || {};
    return ['tool_call', `call ${c.name || ''} (${enumName(ev.tool_call.executor, 'EXECUTOR_')})`, c.arguments || ''];
  }
  if (ev.tool_result) {
    const o = ev.tool_result.outcome || {};
    const body = o.error ? `error${o.error.code ? ' ' + o.error.code : ''}: ${o.error.message || ''}` : (o.content || '');
    return ['tool_result', `result of ${ev.tool_result.name || ev.tool_result.tool_call_id}`, body];
  }
  if (ev.suspension) {
    return ['suspension', 'waiting on humans', (ev.suspension.pending || []).map((p) => `${p.kind}: ${p.prompt || ''}`).join('\n')];
  }
  if (ev.resolution) {
    // Names who answered only when a person did: an expiry's resolver is
    // the system, and an older log records none (its "by" says only
    // "user" or "system"). The tool_result that follows has the code.
    const r = ev.resolution;
    const status = enumName(r.status, 'TOOL_CALL_STATUS_');
    const by = status !== 'expired' ? who(r.resolver) : '';
    return ['resolution', `resolution: ${status || 'unknown'}${by ? ' by ' + by : ''}`, r.tool_call_id || ''];
  }
  if (ev.rewind) return ['rewind', `rewind to ${ev.rewind.to_seq}`, ev.rewind.reason || ''];
  if (ev.turn_failed) return ['turn_failed', 'turn failed' + (ev.turn_failed.code ? ': ' + ev.turn_failed.code : ''), ev.turn_failed.message || ''];
  if (ev.handoff) return ['handoff', `handoff ${agentName(ev.handoff.from)} → ${agentName(ev.handoff.to)}`, ev.handoff.message || ''];
  return ['other', 'event', ''];
}

// agentName names an agent of a multi-agent conversation; "" (absent) is
// the default agent.
const agentName = (name) => name || 'default';

function eventItem(ev) {
  const [kind, head, body] = describe(ev);
  const time = ev.time ? new Date(ev.time).toLocaleTimeString() : '';
  return el('li', { 'data-kind': kind, 'data-seq': String(ev.seq || '') },
    el('div', { class: 'head' }, `#${ev.seq} · ${head}${time ? ' · ' + time : ''}`),
    body ? el('div', { class: kind === 'tool_call' || kind === 'tool_result' ? 'mono' : '' }, body) : null);
}

// ---- routing --------------------------------------------------------------

let viewAbort = null; // aborts the current view's timers and streams

function show(id) {
  for (const v of ['login-view', 'calls-view', 'convs-view', 'conv-view']) $(v).hidden = v !== id;
  $('nav-calls').classList.toggle('current', id === 'calls-view');
  $('nav-conversations').classList.toggle('current', id === 'convs-view' || id === 'conv-view');
}

function route() {
  if (viewAbort) viewAbort.abort();
  viewAbort = new AbortController();
  const signal = viewAbort.signal;
  if (!token()) {
    $('nav').hidden = true;
    show('login-view');
    $('token').focus();
    return;
  }
  $('nav').hidden = false;
  const hash = location.hash.replace(/^#/, '') || '/calls';
  const [path, query] = hash.split('?');
  if (path.startsWith('/c/')) {
    conversationView(decodePart(path.slice(3)), signal);
  } else if (path === '/conversations') {
    conversationsView(new URLSearchParams(query || '').get('q') || '', signal);
  } else {
    callsView(signal);
  }
}

// decodePart decodes a percent-encoded part of the route, or returns it
// as it is when it is no valid encoding (a link typed or cut wrong).
function decodePart(s) {
  try { return decodeURIComponent(s); } catch (e) { return s; }
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  $('login-error').textContent = message || '';
  route();
  drafts.clear(); // the next to sign in is not shown them
  reasons.clear();
  endedCalls.clear();
}

// ---- sign in ---------------------------------------------------------------

// sendable reports whether t can go in the Authorization header: a header
// value holds only ISO-8859-1 characters, no line breaks nor NUL.
function sendable(t) {
  try {
    new Headers({ Authorization: 'Bearer ' + t });
    return true;
  } catch (e) {
    return false;
  }
}

async function signIn(ev) {
  ev.preventDefault();
  const t = $('token').value.trim();
  if (!t) return;
  if (!sendable(t)) {
    // fetch would throw before sending, which reads as a server that
    // cannot be reached.
    $('login-error').textContent = 'This token is not valid: it has characters a token cannot have.';
    return;
  }
  $('login-error').textContent = '';
  $('login-submit').disabled = true;
  sessionStorage.setItem(TOKEN_KEY, t);
  try {
    await api('GET', 'calls?limit=1'); // any authenticated request checks the token
    $('token').value = '';
    route();
  } catch (e) {
    if (e.status !== 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      $('login-error').textContent = 'Could not sign in: ' + e.message;
    }
  } finally {
    $('login-submit').disabled = false;
  }
}

// ---- the queue of pending approvals -----------------------------------------

const cards = new Map(); // call id -> card state, while the queue is shown
const reasons = new Map(); // call id -> the reason typed in its card, kept while the queue is left
// endedCalls holds the calls an answer found pending in an ended
// conversation (409 ended): the API lists them still (they are pending
// for good), and their cards are shown as ended, not to be answered, for
// as long as the tab is signed in.
const endedCalls = new Set();

function callsView(signal) {
  show('calls-view');
  cards.clear();
  $('calls').replaceChildren();
  $('calls-status').textContent = 'Loading…';
  queueMore = null;
  loadCalls();
  const poll = setInterval(loadCalls, POLL_MS);
  const tick = setInterval(tickCountdowns, 1000);
  signal.addEventListener('abort', () => {
    clearInterval(poll);
    clearInterval(tick);
    // A reason typed in a card still pending is its card's again when the
    // queue is shown again (after a look at the call's conversation, say).
    for (const [id, card] of cards) {
      if (card.state === 'pending' && card.reason.value) reasons.set(id, card.reason.value); else reasons.delete(id);
    }
  });
}

// loadCalls reads the queue: pages of the API (ordered by conversation,
// not by age) until QUEUE_CALLS calls are shown or none is left, at most
// QUEUE_PAGES pages (a page filtered by who may see the calls may be short,
// even empty, with more behind it). A card whose call the pages read no
// longer hold was answered elsewhere, or expired, if the listing was read
// to its end; else its call is read again, as new calls of conversations
// sorting before it may have pushed it past the pages read. A read that a
// newer one (Refresh, the poll, the queue shown again) started after is
// dropped: its pages may be older than the cards shown, whose calls they
// would not hold.
let loadGen = 0;
async function loadCalls() {
  const gen = ++loadGen;
  const seen = new Set();
  let cursor = '';
  try {
    for (let pages = 0; pages < QUEUE_PAGES; pages++) {
      const p = new URLSearchParams({ limit: String(QUEUE_CALLS) });
      if (cursor) p.set('cursor', cursor);
      const data = await api('GET', 'calls?' + p.toString());
      if (gen !== loadGen || $('calls-view').hidden) return;
      for (const c of data.calls) {
        seen.add(c.id);
        if (!cards.has(c.id)) {
          const card = callCard(c);
          cards.set(c.id, card);
          $('calls').append(card.root);
        }
      }
      cursor = data.next_cursor;
      if (!cursor || seen.size >= QUEUE_CALLS) break;
    }
  } catch (e) {
    if (gen === loadGen) {
      queueMore = null;
      $('calls-status').textContent = 'Could not load the queue: ' + e.message;
    }
    return;
  }
  const left = [...cards.values()].filter((card) => card.state === 'pending' && !card.busy && !seen.has(card.call.id));
  await Promise.all(left.map((card) => (cursor ? recheck(card) : settleElsewhere(card))));
  queueMore = Boolean(cursor);
  showPending();
  tickCountdowns();
}

// queueMore is whether the last read of the queue left calls unread;
// null while none went through (the status says why).
let queueMore = null;

// showPending says how many cards are pending, once the queue was read:
// after every read, and as soon as a card is answered or settled.
function showPending() {
  if (queueMore === null || $('calls-view').hidden) return;
  const pending = [...cards.values()].filter((c) => c.state === 'pending').length;
  $('calls-status').textContent = (pending ? `${pending} pending` : 'No pending approvals.') +
    (queueMore ? ' More calls wait than are shown: answer these first.' : '');
}

function callCard(c) {
  const card = { call: c, state: 'pending', busy: false };
  card.countdown = el('span', { class: 'countdown' });
  card.reason = el('input', { type: 'text', class: 'reason', placeholder: 'Reason (required to reject; Enter rejects)' });
  card.approve = el('button', { type: 'button', class: 'approve' }, 'Approve');
  card.reject = el('button', { type: 'button', class: 'reject' }, 'Reject');
  card.outcome = el('p', { class: 'outcome', role: 'status', tabIndex: -1 });
  card.context = el('ol', { class: 'context' });
  const reasonID = 'reason-' + c.id;
  card.reason.id = reasonID;
  card.reason.value = reasons.get(c.id) || '';
  card.root = el('article', { class: 'call', 'data-call-id': c.id, 'data-state': 'pending' },
    el('header', {},
      el('span', { class: 'tool' }, c.tool),
      el('span', { class: 'who' }, `asked ${ago(c.created)}${c.requester ? ' by ' + who(c.requester) : ''}`),
      card.countdown),
    el('p', { class: 'prompt' }, c.prompt || '(no prompt)'),
    el('pre', { class: 'args' }, pretty(c.arguments)),
    el('div', { class: 'who' }, 'Conversation ', el('a', { href: '#/c/' + enc(c.conversation_id), class: 'mono' }, c.conversation_id)),
    card.context,
    el('label', { htmlFor: reasonID }, 'Reason'),
    card.reason,
    el('div', { class: 'actions' }, card.approve, card.reject),
    card.outcome);
  card.approve.addEventListener('click', () => answer(card, true));
  card.reject.addEventListener('click', () => answer(card, false));
  // Enter in the reason rejects with it (never approves; an empty reason
  // is asked for); not while an input method composes text.
  card.reason.addEventListener('keydown', (ev) => {
    if (ev.key !== 'Enter' || ev.isComposing || ev.repeat || ev.shiftKey || ev.ctrlKey || ev.altKey || ev.metaKey) return;
    ev.preventDefault();
    answer(card, false);
  });
  loadContext(card);
  if (endedCalls.has(c.id)) settle(card, 'ended', ENDED);
  return card;
}

// loadContext shows the last events of the call's conversation, for those
// who may read it (its owner, operators); others see the prompt and
// arguments only.
async function loadContext(card) {
  if (unaddressable(card.call.conversation_id)) {
    card.context.replaceChildren(el('li', { class: 'muted' }, UNADDRESSABLE));
    return;
  }
  try {
    const page = await api('GET', `conversations/${enc(card.call.conversation_id)}/events?limit=${CONTEXT_EVENTS}`);
    card.context.replaceChildren(...page.events.map((ev) => {
      const [kind, head, body] = describe(ev);
      return el('li', { 'data-kind': kind }, `${head}: ${body.length > 300 ? body.slice(0, 300) + '…' : body}`);
    }));
  } catch (e) {
    card.context.replaceChildren(el('li', { class: 'muted' },
      e.status === 404 ? 'The conversation is not visible to you.' : 'Context unavailable: ' + e.message));
  }
}

function tickCountdowns() {
  const now = Date.now();
  for (const card of cards.values()) {
    const cd = card.countdown;
    if (card.state !== 'pending') { cd.textContent = ''; continue; }
    if (!card.call.deadline) { cd.textContent = 'no deadline'; continue; }
    const left = Date.parse(card.call.deadline) - now;
    cd.classList.toggle('urgent', left > 0 && left < 5 * 60 * 1000);
    cd.classList.toggle('over', left <= 0);
    cd.textContent = left > 0 ? 'expires in ' + duration(left) : 'deadline passed';
    cd.title = new Date(card.call.deadline).toLocaleString();
  }
}

// holdFocus moves the focus to card's outcome when it is on one of the
// card's controls, about to be turned off: a control turned off drops the
// focus to the top of the page, and a keyboard user's place in the queue
// with it.
function holdFocus(card) {
  if ([card.approve, card.reject, card.reason].includes(document.activeElement)) card.outcome.focus();
}

function settle(card, state, message) {
  card.state = state;
  card.root.dataset.state = state;
  holdFocus(card);
  card.approve.disabled = card.reject.disabled = card.reason.disabled = true;
  card.outcome.textContent = message;
  tickCountdowns();
  showPending();
}

// settleElsewhere marks a call answered by someone else (or expired), with
// what the server says of it.
async function settleElsewhere(card) {
  settle(card, 'stale', 'Already answered.');
  try {
    answeredAs(card, await api('GET', 'calls/' + enc(card.call.id), undefined, answerTimeoutMS));
  } catch (e) {
    if (e.status === 404) settle(card, 'gone', GONE);
  }
}

// settleUnknown says on card that its answer may or may not have been
// recorded (unknown_outcome, or no answer came: see unknownOutcome):
// never "not answered". The call is read again: answered (by this answer
// or another), the card says so; still pending, or not readable, its
// buttons are on again (not before: a click while the call is read would
// be ignored), and answering again tells (an answer already recorded
// makes the next one stale).
async function settleUnknown(card, e) {
  card.outcome.textContent = 'Outcome unknown' + (e.code === 'network' || e.code === 'no_answer' ? ' (' + e.message + ')' : '') +
    ': the answer may or may not have been recorded. Answer again to find out.';
  const again = () => { if (card.state === 'pending') card.approve.disabled = card.reject.disabled = false; };
  let c;
  try {
    c = await api('GET', 'calls/' + enc(card.call.id), undefined, answerTimeoutMS);
  } catch (e) {
    if (e.status === 404) settle(card, 'gone', GONE); else again();
    return;
  }
  if (c.status === 'pending' || card.state !== 'pending') { again(); return; }
  settle(card, 'stale', 'Already answered.');
  answeredAs(card, c);
}

// answeredAs says on card how its call c ended (its outcome, see the
// Call schema), naming who answered it only when a person did. An answer
// is not called an approval: a resolve over the API may carry any result,
// which the Call does not show.
function answeredAs(card, c) {
  const outcome = c.outcome || 'unknown';
  const name = ['answered', 'rejected', 'errored'].includes(outcome) ? who(c.resolver) : '';
  const by = name ? ' by ' + name : '';
  card.outcome.textContent = {
    pending: 'Not answered yet: it is pending.',
    answered: `Already answered${by}.`,
    rejected: `Already answered: rejected${by}.`,
    expired: 'Already answered: the call expired.',
    cancelled: 'Cancelled: a rewind (or an edit) of the conversation took the call back before anyone answered it.',
    errored: `Already answered: it ended in an error${by}.`,
  }[outcome] || 'The call has ended.';
}

// recheck reads the call of a pending card that the queue's pages did not
// hold: still pending (past those pages), its card is left as it is;
// answered, or gone, it is marked so.
async function recheck(card) {
  let c;
  try {
    c = await api('GET', 'calls/' + enc(card.call.id), undefined, answerTimeoutMS);
  } catch (e) {
    if (e.status === 404 && card.state === 'pending' && !card.busy) settle(card, 'gone', GONE);
    return;
  }
  if (c.status === 'pending' || card.state !== 'pending' || card.busy) return;
  settle(card, 'stale', 'Already answered.');
  answeredAs(card, c);
}

async function answer(card, approve) {
  if (card.state !== 'pending' || card.busy) return;
  const reason = card.reason.value.trim();
  if (!approve && !reason) {
    card.outcome.textContent = 'Give a reason to reject.';
    card.reason.focus();
    return;
  }
  const result = { approved: true };
  if (reason) result.reason = reason;
  const bytes = new TextEncoder().encode(approve ? JSON.stringify(result) : reason).length;
  if (bytes > MAX_RESULT_BYTES) {
    card.outcome.textContent = `The reason is too long: the answer would be ${bytes} bytes, and the server takes at most ${MAX_RESULT_BYTES}.`;
    return;
  }
  card.busy = true;
  holdFocus(card);
  card.approve.disabled = card.reject.disabled = true;
  card.outcome.textContent = 'Sending…';
  try {
    if (approve) {
      await api('POST', `calls/${enc(card.call.id)}/resolve`, { result }, answerTimeoutMS);
      settle(card, 'approved', 'Approved.');
    } else {
      await api('POST', `calls/${enc(card.call.id)}/reject`, { reason }, answerTimeoutMS);
      settle(card, 'rejected', bytes > MAX_ERROR_BYTES
        ? `Rejected. The reason was recorded cut to at most ${MAX_ERROR_BYTES} bytes, ending in "...", as every longer one is.` : 'Rejected.');
    }
  } catch (e) {
    if (e.code === 'stale') await settleElsewhere(card);
    else if (e.code === 'not_found' || e.code === 'deleted') settle(card, 'gone', GONE);
    else if (e.code === 'ended') { // pending for good: no answer can be recorded
      endedCalls.add(card.call.id);
      settle(card, 'ended', ENDED);
    }
    else if (unknownOutcome(e)) await settleUnknown(card, e);
    else {
      // Timeouts, a refusal, a proxy's error: the call may still be open.
      card.approve.disabled = card.reject.disabled = false;
      card.outcome.textContent = (e.code === 'forbidden' ? 'You may not answer this call: ' : 'Not answered: ') + e.message;
    }
  } finally {
    card.busy = false;
  }
}

// ---- the conversation list ---------------------------------------------------

// parseSearch turns "key=value key2=value2" into query parameters.
function parseSearch(q) {
  const params = new URLSearchParams();
  for (const term of q.split(/\s+/).filter(Boolean)) {
    const i = term.indexOf('=');
    // An empty value matches nothing (a stored value is never empty): the
    // API refuses it, and so does the page, before asking.
    if (i <= 0 || i === term.length - 1) throw new Error(`"${term}" is not key=value`);
    params.set(`metadata[${term.slice(0, i)}]`, term.slice(i + 1));
  }
  return params;
}

function conversationsView(q, signal) {
  show('convs-view');
  $('search').value = q;
  $('convs').replaceChildren();
  $('convs-more').hidden = true;
  let params;
  try {
    params = parseSearch(q);
  } catch (e) {
    $('convs-status').textContent = 'Search: ' + e.message;
    return;
  }
  let cursor = '';
  let shown = 0;
  const more = async () => {
    $('convs-more').hidden = true;
    $('convs-status').textContent = 'Loading…';
    // A page filtered by owner or metadata may be short, even empty, with
    // more behind it: read on until something shows, at most a few pages.
    for (let pages = 0; pages < 10; pages++) {
      const p = new URLSearchParams(params);
      p.set('limit', '50');
      if (cursor) p.set('cursor', cursor);
      let data;
      try {
        data = await api('GET', 'conversations?' + p.toString());
      } catch (e) {
        $('convs-status').textContent = 'Could not list: ' + e.message;
        return;
      }
      if (signal.aborted) return;
      for (const c of data.conversations) $('convs').append(conversationRow(c));
      shown += data.conversations.length;
      cursor = data.next_cursor;
      if (!cursor || data.conversations.length) break;
    }
    $('convs-status').textContent = shown ? `${shown} shown` : 'No conversation matches.';
    $('convs-more').hidden = !cursor;
  };
  $('convs-more').onclick = more;
  more();
}

function conversationRow(c) {
  const md = Object.entries(c.metadata || {}).map(([k, v]) => `${k}=${v}`).join('  ');
  return el('li', { 'data-conversation-id': c.id },
    el('a', { href: '#/c/' + enc(c.id), class: 'mono' }, c.id),
    el('span', { class: 'badge ' + c.status }, c.status),
    el('span', { class: 'muted' }, c.updated ? 'updated ' + ago(c.updated) : ''),
    el('span', { class: 'md' }, md));
}

// ---- a conversation, live ------------------------------------------------------

const drafts = new Map(); // conversation id -> the unsent text of its message box

function conversationView(id, signal) {
  show('conv-view');
  $('conv-title').textContent = id;
  $('conv-status').textContent = '';
  $('conv-meta').replaceChildren();
  $('log').replaceChildren();
  $('log-older').hidden = true;
  $('delta').hidden = true;
  $('delta').textContent = '';
  $('send-error').textContent = '';
  $('send-submit').disabled = false;
  // The message box holds this conversation's draft, kept while the view
  // is left: a draft of another conversation is not sent to this one.
  $('send-text').value = drafts.get(id) || '';
  signal.addEventListener('abort', () => {
    if ($('send-text').value) drafts.set(id, $('send-text').value); else drafts.delete(id);
  });
  $('conv-live').textContent = 'Loading…';
  const state = { id, last: 0, oldest: 0, delta: '', signal };
  $('send-form').onsubmit = (ev) => send(ev, state);
  $('log-older').onclick = () => older(state);
  openConversation(state);
}

async function openConversation(state) {
  if (unaddressable(state.id)) {
    $('conv-live').textContent = UNADDRESSABLE;
    $('send-submit').disabled = true;
    return;
  }
  try {
    const c = await api('GET', 'conversations/' + enc(state.id));
    if (state.signal.aborted) return;
    setStatus(c.status);
    $('conv-meta').replaceChildren(...Object.entries(c.metadata || {}).flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
    const page = await api('GET', `conversations/${enc(state.id)}/events?limit=100`);
    if (state.signal.aborted) return;
    for (const ev of page.events) appendEvent(state, ev, false);
    state.oldest = page.next_before;
    $('log-older').hidden = !page.next_before;
  } catch (e) {
    if (state.signal.aborted) return;
    $('conv-live').textContent = e.status === 404 ? 'No such conversation (or it is not yours).'
      : e.code === 'deleted' ? 'This conversation was deleted.' : 'Could not load: ' + e.message;
    return;
  }
  follow(state);
}

function setStatus(s) {
  $('conv-status').textContent = s;
  $('conv-status').className = 'badge ' + s;
}

// older puts the page of events before those shown at the top of the log,
// unless the view was left meanwhile (the log is another's now); a click
// while a page is read is ignored (it would put the same page twice).
async function older(state) {
  if (state.readingOlder) return;
  state.readingOlder = true;
  try {
    const page = await api('GET', `conversations/${enc(state.id)}/events?limit=100&before=${state.oldest}`);
    if (state.signal.aborted) return;
    $('log').prepend(...page.events.map(eventItem));
    state.oldest = page.next_before;
    $('log-older').hidden = !page.next_before;
  } catch (e) {
    if (!state.signal.aborted) $('conv-live').textContent = 'Could not load older events: ' + e.message;
  } finally {
    state.readingOlder = false;
  }
}

// appendEvent shows ev unless it is already shown; a live one (from the
// stream, not the history loaded first) also moves the status shown.
function appendEvent(state, ev, live) {
  const seq = Number(ev.seq);
  if (seq <= state.last) return; // already shown
  state.last = seq;
  $('log').append(eventItem(ev));
  if (ev.assistant_msg) setDelta(state, '');
  if (!live) return;
  if (ev.suspension) setStatus('suspended');
  else if (ev.user_msg || ev.resolution) setStatus('active');
}

function setDelta(state, text) {
  state.delta = text;
  $('delta').textContent = text;
  $('delta').hidden = !text;
}

function note(text) {
  $('log').append(el('li', { class: 'note' }, text));
}

// follow reads the conversation's event stream with fetch (so that the
// token goes in a header) and reconnects with Last-Event-ID until the view
// is left.
// A stream refused at the conversation's subscription cap (429
// too_many_subscriptions) is asked for again after the answer's
// Retry-After, not sooner (which gets another 429), and the view says why
// it waits; one a cluster's owner refused (an error message of that code)
// is asked for again after CAP_RETRY_MS, the server's
// RetryAfterTooManySubscriptions. The backoff between attempts (1s,
// doubling up to 15s) starts again from 1s only after a stream that showed
// a new event or stayed open STEADY_MS: one that opens and ends at once
// (lagged, unavailable) is not asked for again every second.
// Another refusal the server may get over (a 5xx, 408, or a 429 other
// than the cap's) is shown with the server's message, or its status when
// the answer is no API error (a proxy's page); a stream the server ended
// with an error message of one of RECONNECT_CODES (lagged, closed) is
// shown with that message; a request that got no answer says the server
// cannot be reached.
async function follow(state) {
  const { signal } = state;
  let backoff = 1000;
  while (!signal.aborted) {
    let fatal = false;
    let wait = 0; // ms before asking again, when the server said
    let reason = ''; // the server's message, when it refused the stream
    let opened = 0; // when the stream was opened
    const last = state.last;
    try {
      let res;
      try {
        res = await fetch(`${API}conversations/${enc(state.id)}/stream`, {
          headers: { Authorization: 'Bearer ' + token(), Accept: 'text/event-stream', 'Last-Event-ID': String(state.last) },
          cache: 'no-store', credentials: 'omit', signal,
        });
      } catch (e) {
        reason = 'cannot reach the server';
        throw e;
      }
      if (!res.ok) {
        let err = {};
        try { err = (await res.json()).error || {}; } catch (e) { /* not JSON */ }
        if (res.status === 401) { signOut('The token was refused.'); return; }
        if (res.status === 404 || res.status === 410) {
          $('conv-live').textContent = err.code === 'deleted' ? 'This conversation was deleted.' : 'This conversation is gone.';
          return;
        }
        if (res.status < 500 && res.status !== 408 && res.status !== 429) {
          // Refused for good (a Last-Event-ID past the log's end: a store
          // restored from an older copy, say): asking again gets the same.
          $('conv-live').textContent = 'Could not follow: ' + (err.message || res.statusText || 'HTTP ' + res.status);
          return;
        }
        if (res.status === 429) {
          const secs = Number(res.headers.get('Retry-After'));
          wait = Number.isFinite(secs) && secs > 0 ? secs * 1000 : CAP_RETRY_MS;
          if (err.code !== 'too_many_subscriptions') reason = err.message || 'server answered ' + res.status;
        } else {
          reason = err.message || 'server answered ' + res.status;
        }
        throw new Error(err.message || res.statusText);
      }
      $('conv-live').textContent = '● live';
      opened = Date.now();
      const end = await readStream(state, res.body);
      fatal = end.over === true;
      wait = end.wait || 0;
      reason = end.reason || '';
    } catch (e) {
      if (signal.aborted) return;
    }
    if (fatal || signal.aborted) return;
    if (opened && (state.last > last || Date.now() - opened >= STEADY_MS)) backoff = 1000;
    if (wait) {
      $('conv-live').textContent = `${reason || 'Too many streams of this conversation are open'}: trying again in ${Math.ceil(wait / 1000)}s…`;
      await sleep(wait, signal);
      continue;
    }
    $('conv-live').textContent = reason ? `${reason}: reconnecting…` : 'reconnecting…';
    await sleep(backoff, signal);
    backoff = Math.min(backoff * 2, 15000);
  }
}

const CAP_RETRY_MS = 5000; // the server's RetryAfterTooManySubscriptions
// STEADY_MS is measured with Date.now, which a test moves on rather than
// wait this long.
const STEADY_MS = 10000; // a stream open this long resets the backoff

// RECONNECT_CODES are the codes of a stream's error message after which
// the stream is read again: a client too slow (lagged) and a failure of the
// server's (the 5xx codes; closed ends every stream of a server that shuts
// down, to be resumed once it is back).
const RECONNECT_CODES = new Set(['lagged', 'closed', 'unavailable', 'internal', 'timeout', 'unknown_outcome']);

// readStream parses server-sent events until the stream ends; it returns
// {over: true} when the server ended it for good (an error whose code is
// not one of RECONNECT_CODES), {wait: CAP_RETRY_MS} when it ended it with
// too_many_subscriptions (to be asked for again after that long),
// {reason} with the server's message when it ended it with one of
// RECONNECT_CODES, else {}.
async function readStream(state, body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let fresh = true; // the first deltas of a connection replace the partial answer
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return {};
    buf += value.replace(/\r\n?/g, '\n');
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let event = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        const val = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
        if (field === 'event') event = val;
        else if (field === 'data') data.push(val);
      }
      if (!data.length) continue;
      let msg;
      try { msg = JSON.parse(data.join('\n')); } catch (e) { continue; }
      switch (event) {
        case 'event':
          appendEvent(state, msg, true);
          fresh = false;
          break;
        case 'delta':
          setDelta(state, (fresh ? '' : state.delta) + (msg.text || ''));
          fresh = false;
          break;
        case 'restart': // the model call was abandoned: its text is void
          setDelta(state, '');
          fresh = false;
          break;
        case 'retry':
          setDelta(state, '');
          note(`model call failed (attempt ${msg.attempt}), retrying in ${duration(msg.delay_ms)}: ${msg.error || ''}`);
          break;
        case 'turn_end':
          setDelta(state, '');
          setStatus(msg.outcome === 'suspended' ? 'suspended' : 'idle');
          if (msg.outcome === 'failed' || msg.outcome === 'cancelled') note(`turn ${msg.outcome}${msg.error ? ': ' + msg.error : ''}`);
          break;
        case 'error': {
          // lagged, or the server's side (a shutdown: closed): reconnect
          // from the last seq; else (deleted, say) the stream is over.
          const err = msg.error || {};
          if (RECONNECT_CODES.has(err.code)) return { reason: err.message || err.code };
          if (err.code === 'too_many_subscriptions') return { wait: CAP_RETRY_MS };
          $('conv-live').textContent = 'stream ended: ' + (err.message || err.code);
          return { over: true };
        }
      }
    }
  }
}

// send sends the message box's text, once: a submit while a send is in
// flight is ignored, and the same text sent again after a failure goes
// with the same request_id, so that a send the server may have written
// (unknown_outcome, a timeout, a cut connection) is not written twice.
async function send(ev, state) {
  ev.preventDefault();
  if (state.sending || unaddressable(state.id)) return;
  const text = $('send-text').value;
  if (!text.trim()) return;
  if (!state.unsent || state.unsent.text !== text) state.unsent = { text, id: 'console-' + randomID() };
  $('send-error').textContent = '';
  state.sending = true;
  $('send-submit').disabled = true;
  try {
    await api('POST', `conversations/${enc(state.id)}/messages`, { text, request_id: state.unsent.id }, answerTimeoutMS);
    state.unsent = null;
    if (!state.signal.aborted) $('send-text').value = '';
    else if (drafts.get(state.id) === text) drafts.delete(state.id);
  } catch (e) {
    // Left meanwhile, the text stays the conversation's draft.
    // An unknown outcome is no "not sent": the message may have been
    // written (the stream shows it if it was); sending again tells.
    if (!state.signal.aborted) $('send-error').textContent = (unknownOutcome(e)
      ? 'Outcome unknown: the message may or may not have been sent; send again to make sure (it is not written twice): '
      : 'Not sent: ') + e.message;
  } finally {
    state.sending = false;
    if (!state.signal.aborted) $('send-submit').disabled = false;
  }
}

// ---- start --------------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  $('login-form').addEventListener('submit', signIn);
  $('signout').addEventListener('click', () => signOut(''));
  $('calls-refresh').addEventListener('click', loadCalls);
  $('search-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = $('search').value.trim();
    const h = '#/conversations' + (q ? '?q=' + enc(q) : '');
    if (location.hash === h) route(); else location.hash = h;
  });
  window.addEventListener('hashchange', route);
  route();
});
