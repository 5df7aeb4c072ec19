// One limit: its figures, a chart of its last 15 minutes (this node's history), the permits
// held (session, units, fence, held since, lease), the tickets waiting in the order they
// will be served (position, priority level, fairness key and weight, waiting for), and the
// grants and refusals the event stream showed since the page opened. Holders and waiters
// are re-read when an event names this limit (or names no limit: a session's expiry, a
// grant from a queue the node could not name) and on resync; the chart every few seconds.
//
// Times: a holder's `granted_at_ms` and `lease_expires_at_ms` and a waiter's
// `queued_at_ms` are on the cluster's log clock; the page's `now_ms` is that clock when the
// node read them. `logClock` (dom.js) places each on this browser's clock by its distance
// from `now_ms`, so "held since 12:04:31", "lease ends in 2.4 s" and "waiting for 3.1 s"
// need no agreement between the two machines' clocks, and count on between reads.

import { get, seg } from './api.js';
import { charts } from './chart.js';
import { bar, clock, debounce, errorBox, h, loading, logClock, relative, show, table } from './dom.js';

/** Recent events kept on the page. */
const RECENT_MAX = 50;

/** Rows of holders or waiters shown per page. */
const PAGE = 100;

/** How often the chart is re-read while the page is shown, ms (the node samples each second). */
const CHART_MS = 2000;

export function mount(root, ctx, [tenant, name]) {
  const base = `/v1/tenants/${seg(tenant)}/limits/${seg(name)}`;
  const summary = h('div', { id: 'limit-summary' }, loading());
  const chart = h('div', { id: 'limit-chart' }, loading('loading the last 15 minutes…'));
  const holders = h('div', { id: 'holders' }, loading());
  const waiters = h('div', { id: 'waiters' }, loading());
  const recent = h('ol', { id: 'recent', class: 'log', 'aria-live': 'polite' });
  const recentEmpty = h('p', { id: 'recent-empty', class: 'muted' }, 'Nothing yet: grants and refusals of this limit appear here as they happen.');
  const seen = [];
  show(root,
    h('p', {}, h('a', { href: `#/limits/${seg(tenant)}` }, `← limits of ${tenant}`)),
    h('h1', {}, `${tenant} / ${name}`), summary,
    h('h2', {}, 'Last 15 minutes'), chart,
    h('h2', {}, 'Holders'), holders,
    h('h2', {}, 'Waiters, in serving order'), waiters,
    h('h2', {}, 'Recent grants and refusals (live)'), recentEmpty, recent);

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
      const hc = logClock(hs.now_ms);
      show(holders, table(`${hs.total} held`, [['session'], ['ticket', true], ['units', true], ['fence', true],
        ['held since'], ['held for', true], ['agent'], ['key'], ['lease ends']],
      hs.items.map((x) => [x.session, x.ticket, x.units, x.fence, clock(hc.wall(x.granted_at_ms)),
        relative(hc.wall(x.granted_at_ms), 'since'), x.agent ?? '—', x.key ?? '—',
        x.lease_expires_at_ms ? relative(hc.wall(x.lease_expires_at_ms), 'until') : 'session gone']),
      'No permits held.'), more(hs));
      const wc = logClock(ws.now_ms);
      show(waiters, table(`${ws.total} waiting`, [['position', true], ['priority', true], ['fairness key'],
        ['weight', true], ['waiting for', true], ['session'], ['ticket', true], ['units', true], ['agent'], ['key']],
      ws.items.map((x) => [x.position, x.level, x.fairness_key || '(default)', x.weight || '—',
        x.queued_at_ms != null ? relative(wc.wall(x.queued_at_ms), 'since') : h('span', { class: 'muted' }, 'before this node watched'),
        x.session, x.ticket, x.units, x.agent ?? '—', x.key ?? '—']),
      'No tickets waiting.'), more(ws));
    } catch (e) {
      for (const el of [summary, holders, waiters]) show(el, errorBox(e));
    }
  }

  async function loadChart() {
    try {
      const answer = await get(`${base}/history`);
      show(chart, charts(answer.history, 'limit-history'),
        h('p', { class: 'muted' }, `As node ${answer.node} saw it: a sample a second, kept for 15 minutes.`));
    } catch (e) { show(chart, errorBox(e)); }
  }

  function note(text, cls) {
    seen.unshift(h('li', { class: cls }, `${clock(Date.now())} ${text}`));
    seen.length = Math.min(seen.length, RECENT_MAX);
    recentEmpty.hidden = true;
    show(recent, seen);
  }

  const refresh = debounce(load, 300);
  load();
  loadChart();
  const timer = setInterval(loadChart, CHART_MS);
  return {
    dispose() { clearInterval(timer); },
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

function more(page) {
  return page.next == null ? null : h('p', { class: 'muted' }, `showing ${page.items.length} of ${page.total}`);
}
