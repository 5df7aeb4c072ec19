// Charts of the last 15 minutes, drawn here as SVG (no library): the node's history of a
// limit or a tenant (`GET .../history`: a sample a second, oldest first, with the age of the
// newest), as two panels — units in use and tickets waiting; grants and refusals a second.
// The x axis is time before now on the node's own clock (sample ages, never a wall clock
// compared across machines), over the shortest of 1, 2, 5, 10 or 15 minutes that holds
// every sample (a node that started a minute ago has a minute to show); each series is a
// polyline with a dot at its newest point.

import { h } from './dom.js';

const SVG_NS = 'http://www.w3.org/2000/svg';
/** The windows a chart may show, s; the longest is what the node keeps. */
const WINDOWS_S = [60, 120, 300, 600, 900];
const W = 560;
const H = 150;
const PAD = { left: 44, right: 12, top: 10, bottom: 24 };

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/** The samples of a history answer as points {ago_s, ...sample}, oldest first. */
export function points(history) {
  const n = history.samples.length;
  const step = history.interval_ms / 1000;
  const newest = (history.newest_age_ms ?? 0) / 1000;
  return history.samples.map((s, i) => ({ ...s, ago_s: newest + (n - 1 - i) * step }));
}

/** A number as a chart labels it: 0, 3, 2.5, 1.2k. */
function short(v) {
  if (v >= 1000) return `${(v / 1000).toFixed(v >= 10_000 ? 0 : 1)}k`;
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

/**
 * One panel: `series` as [{label, cls, value(point)}] over `pts`. An empty history draws
 * the axes and says so.
 */
function panel(title, pts, series, id) {
  // A value may be null: a keyed limit of too many keys for the node to sum (not drawn).
  const max = Math.max(1, ...pts.flatMap((p) => series.map((s) => s.value(p) ?? 0)));
  const top = max * 1.1;
  const oldest = pts.length ? pts[0].ago_s : 0;
  const span = WINDOWS_S.find((w) => w >= oldest) ?? WINDOWS_S[WINDOWS_S.length - 1];
  const x = (ago) => PAD.left + (1 - Math.min(ago, span) / span) * (W - PAD.left - PAD.right);
  const y = (v) => H - PAD.bottom - (v / top) * (H - PAD.top - PAD.bottom);
  const last = pts[pts.length - 1];
  const said = (s, p) => (s.value(p) == null ? 'not sampled' : short(s.value(p)));
  const summary = last ? series.map((s) => `${s.label} ${said(s, last)}`).join(', ') : 'no samples yet';
  const words = span < 120 ? `${span} s` : `${span / 60} minutes`;
  const chart = svg('svg', {
    class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${title}, last ${words}: now ${summary}`,
    'data-window-s': span,
  });
  for (const v of [0, max / 2, max]) {
    chart.append(svg('line', { class: 'grid', x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v) }),
      svg('text', { class: 'tick', x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end' }, short(v)));
  }
  for (const part of [3, 2, 1, 0]) {
    const ago = (span * part) / 3;
    const label = ago === 0 ? 'now' : span < 300 ? `−${Math.round(ago)} s` : `−${Math.round(ago / 60)} min`;
    chart.append(svg('text', { class: 'tick', x: x(ago), y: H - 6, 'text-anchor': part === 3 ? 'start' : 'middle' }, label));
  }
  for (const s of series) {
    const drawn = pts.filter((p) => s.value(p) != null);
    if (!drawn.length) continue;
    const coords = drawn.map((p) => `${x(p.ago_s).toFixed(1)},${y(s.value(p)).toFixed(1)}`).join(' ');
    chart.append(svg('polyline', { class: `line ${s.cls}`, points: coords, 'data-points': drawn.length }));
    const end = drawn[drawn.length - 1];
    chart.append(svg('circle', { class: `dot ${s.cls}`, cx: x(end.ago_s), cy: y(s.value(end)), r: 3 }));
  }
  if (!pts.length) {
    chart.append(svg('text', { class: 'tick', x: W / 2, y: H / 2, 'text-anchor': 'middle' },
      'no samples yet: the node samples once a second'));
  }
  const legend = h('p', { class: 'legend' }, series.map((s) =>
    h('span', { class: `key ${s.cls}` }, `${s.label}: ${last ? said(s, last) : '—'}`)));
  return h('figure', { class: 'chart-panel', id }, h('figcaption', {}, title), chart, legend);
}

/** The two panels of one history answer; `id` prefixes their ids. */
export function charts(history, id) {
  const pts = points(history);
  const perSecond = 1000 / history.interval_ms;
  return h('div', { class: 'charts' },
    panel('In use and waiting', pts, [
      { label: 'in use', cls: 's1', value: (p) => p.in_use ?? null },
      { label: 'waiting', cls: 's2', value: (p) => p.waiting ?? null },
    ], `${id}-load`),
    panel('Grants and refusals a second', pts, [
      { label: 'grants/s', cls: 's1', value: (p) => p.grants * perSecond },
      { label: 'refusals/s', cls: 's3', value: (p) => p.refusals * perSecond },
    ], `${id}-rate`));
}
