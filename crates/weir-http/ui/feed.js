// The cluster's event stream (`GET /v1/events`) read with fetch, not EventSource, so the
// token goes in the Authorization header rather than the URL. Reconnects with backoff; after
// a reconnect the views are sent `resync` (they may have missed events while it was down),
// as they are when the node says they fell behind.

import { authHeaders, notifyUnauthorized } from './api.js';

/** Follows the stream, calling `onEvent(name, data)` and `onState('live'|'down'|...)`. */
export function follow(onEvent, onState) {
  let stopped = false;
  let abort = null;
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  (async () => {
    let backoff = 250;
    let first = true;
    while (!stopped) {
      abort = new AbortController();
      try {
        const r = await fetch('/v1/events', {
          headers: authHeaders({ Accept: 'text/event-stream' }), signal: abort.signal,
        });
        if (r.status === 401) { onState('needs a token'); notifyUnauthorized(); return; }
        if (r.status === 403) { onState('not allowed for this token'); return; }
        if (!r.ok) throw new Error(`status ${r.status}`);
        onState('live');
        if (!first) onEvent('resync', { reason: 'reconnected' });
        first = false;
        backoff = 250;
        await read(r.body, onEvent);
      } catch (e) {
        if (stopped) return;
      }
      onState('down');
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 4000);
    }
  })();
  return () => { stopped = true; abort?.abort(); };
}

/** Reads server-sent events from `body` until it ends. */
async function read(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      dispatch(block, onEvent);
    }
  }
}

function dispatch(block, onEvent) {
  let name = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') name = value;
    else if (field === 'data') data.push(value);
  }
  if (!data.length) return;
  let parsed;
  try { parsed = JSON.parse(data.join('\n')); } catch { return; }
  onEvent(name, parsed);
}
