// One limit: its figures, the permits held (session, units, fence, held for, lease), the
// tickets waiting in the order they will be served (position, priority level, fairness key
// and weight), and
// the grants and refusals the event stream showed since the page opened. Holders and
// waiters are re-read when an event names this limit (or names no limit: a session's
// expiry, a grant from a queue the node could not name) and on resync.
//
// "Held for" is the page's `now_ms` less the holder's `granted_at_ms`: both on the cluster's
// log clock, read in the same linearizable read, so the browser's clock plays no part (the
// figure is as of the last read, which every grant or release of the limit refreshes).

import { get, seg } from './api.js';
import { bar, clock, debounce, errorBox, h, show, table } from './dom.js';

/** Recent events kept on the page. */
const RECENT_MAX = 50;

/** Rows of holders or waiters shown per page. */
const PAGE = 100;

export function mount(root, ctx, [tenant, name]) {
  const base = `/v1/tenants/${seg(tenant)}/limits/${seg(name)}`;
  const summary = h('div', { id: 'limit-summary' });
  const holders = h('div', { id: 'holders' });
  const waiters = h('div', { id: 'waiters' });
  const recent = h('ol', { id: 'recent', class: 'log', 'aria-live': 'polite' });
  const seen = [];
  show(root,
    h('p', {}, h('a', { href: `#/limits/${seg(tenant)}` }, `← limits of ${tenant}`)),
    h('h1', {}, `${tenant} / ${name}`), summary,
    h('h2', {}, 'Holders'), holders,
    h('h2', {}, 'Waiters, in serving order'), waiters,
    h('h2', {}, 'Recent grants and refusals (live)'), recent);

  async function load() {
    try {
      const [l, hs, ws] = await Promise.all([
        get(base), get(`${base}/holders?limit=${PAGE}`), get(`${base}/waiters?limit=${PAGE}`),
      ]);
      show(summary, h('p', {},
        l.concurrent > 0 ? [bar(l.in_use, l.concurrent, `${l.in_use} of ${l.concurrent} in use`),
          ` ${l.in_use} of ${l.concurrent} in use · `] : `${l.in_use} in use · `,
        `${l.waiting} waiting`,
        l.per_second > 0 ? ` · ${l.tokens} of ${l.burst} tokens, ${l.per_second}/s` : '',
        ` · most ever held ${l.max_in_use}`, l.removing ? ' · being removed' : ''));
      show(holders, table(`${hs.total} held`, [['session'], ['ticket', true], ['units', true], ['fence', true],
        ['held for', true], ['agent'], ['key'], ['lease ends (log ms)', true]],
      hs.items.map((x) => [x.session, x.ticket, x.units, x.fence, heldFor(hs.now_ms - x.granted_at_ms),
        x.agent ?? '—', x.key ?? '—', x.lease_expires_at_ms])),
      more(hs));
      show(waiters, table(`${ws.total} waiting`, [['position', true], ['priority', true], ['fairness key'],
        ['weight', true], ['session'], ['ticket', true], ['units', true], ['agent'], ['key']],
      ws.items.map((x) => [x.position, x.level, x.fairness_key || '(default)', x.weight || '—', x.session,
        x.ticket, x.units, x.agent ?? '—', x.key ?? '—'])), more(ws));
    } catch (e) { show(summary, errorBox(e)); }
  }

  function note(text, cls) {
    seen.unshift(h('li', { class: cls }, `${clock(Date.now())} ${text}`));
    seen.length = Math.min(seen.length, RECENT_MAX);
    show(recent, seen);
  }

  const refresh = debounce(load, 300);
  load();
  return {
    onEvent(kind, e) {
      const mine = e.tenant === tenant && e.limit === name;
      const unnamed = e.limit == null;
      if (mine && kind === 'granted') note(`granted session ${e.session} ticket ${e.ticket}: ${e.units} unit(s), fence ${e.fence}${e.queued ? ' (from queue)' : ''}`, 'ok');
      if (mine && kind === 'refused') note(`refused session ${e.session} ticket ${e.ticket}: ${e.error} — ${e.message}`, 'bad');
      if (mine && kind === 'queued') note(`queued session ${e.session} ticket ${e.ticket} at position ${e.position}`);
      if (mine && kind === 'released') note(`released session ${e.session} ticket ${e.ticket}`);
      if (kind === 'resync' || mine || (unnamed && ['granted', 'refused', 'released', 'expired'].includes(kind))) refresh();
    },
  };
}

/** A duration in ms as the console shows it: "850 ms", "12.3 s", "4 min 05 s", "2 h 07 min". */
export function heldFor(ms) {
  if (!(ms >= 0)) return '—';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.floor(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor(s / 60) % 60).padStart(2, '0')} min`;
}

function more(page) {
  return page.next == null ? null : h('p', { class: 'muted' }, `showing ${page.items.length} of ${page.total}`);
}
