// Building the page's elements without HTML strings: every text goes in as a text node, so
// nothing a node answers (a halt's reason, a limit's name) can become markup.

const SVG_NS = 'http://www.w3.org/2000/svg';

/** An element `tag` with attributes (`on*` functions become listeners) and children. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** A table: `columns` as [label, numeric?], `rows` as arrays of cells; `empty` is what an
 * empty table says in its one row. */
export function table(caption, columns, rows, empty = 'none') {
  return h('table', {},
    h('caption', { class: 'muted' }, caption),
    h('thead', {}, h('tr', {}, columns.map(([label, num]) =>
      h('th', { scope: 'col', class: num ? 'num' : undefined }, label)))),
    h('tbody', {}, rows.length
      ? rows.map((cells) => h('tr', {}, cells.map((cell, i) =>
        h('td', { 'data-label': columns[i][0], class: columns[i][1] ? 'num' : undefined }, cell))))
      : h('tr', { class: 'empty' }, h('td', { colspan: columns.length, class: 'muted' }, empty))));
}

/** An SVG bar of `used` against `cap` (no cap: an empty bar), labelled for screen readers. */
export function bar(used, cap, label) {
  const width = 120;
  const fill = cap > 0 ? Math.min(1, used / cap) * width : 0;
  const svg = document.createElementNS(SVG_NS, 'svg');
  for (const [k, v] of Object.entries({ class: 'bar', width, height: 14, role: 'img', 'aria-label': label })) {
    svg.setAttribute(k, v);
  }
  const rect = (cls, w) => {
    const r = document.createElementNS(SVG_NS, 'rect');
    for (const [k, v] of Object.entries({ class: cls, x: 0, y: 0, width: w, height: 14 })) r.setAttribute(k, v);
    return r;
  };
  svg.append(rect('bg', width), rect(cap > 0 && used >= cap ? 'fg full' : 'fg', fill));
  return svg;
}

/** What a table or section shows until its first answer. */
export function loading(what = 'loading…') {
  return h('p', { class: 'muted loading', role: 'status' }, what);
}

/** A box saying what failed. */
export function errorBox(e) {
  return h('div', { class: 'error', role: 'alert' }, e.message || String(e));
}

/** Replaces `root`'s children. */
export function show(root, ...children) {
  root.replaceChildren();
  append(root, children);
}

/** Runs `f` at most once per `ms`, trailing: a burst of events is one refresh. */
export function debounce(f, ms) {
  let timer = null;
  return () => {
    if (timer) return;
    timer = setTimeout(() => { timer = null; f(); }, ms);
  };
}

/** A time as HH:MM:SS, local. */
export function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

/** A duration in ms as a person reads it: "850 ms", "2.4 s", "4 min 05 s", "2 h 07 min". */
export function duration(ms) {
  if (!(ms >= 0)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.floor(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor(s / 60) % 60).padStart(2, '0')} min`;
}

/**
 * The log clock, read: a node answers log times (ms on the cluster's log clock, which the
 * browser's clock knows nothing of) beside `now_ms`, its log clock when it answered. The
 * log clock runs at the rate of a wall clock, so a log time `t` happened `now_ms - t` ms
 * before the answer arrived (`readAt`, this browser's clock); that is all the page uses —
 * never the two clocks' absolute values, which differ between machines.
 */
export function logClock(nowMs, readAt = Date.now()) {
  return {
    /** This browser's clock at log time `t`. */
    wall: (t) => readAt - (nowMs - t),
  };
}

/**
 * A time that reads relative to now and stays current: `until` ("in 2.4 s", then "ended
 * 1.0 s ago") or `since` ("3.1 s"), at this browser's clock time `wallMs`. `tick()`
 * rewrites every one on the page.
 */
export function relative(wallMs, kind) {
  const el = h('span', { class: 'rel', 'data-wall': Math.round(wallMs), 'data-kind': kind });
  el.textContent = relText(wallMs, kind);
  return el;
}

function relText(wallMs, kind) {
  const d = wallMs - Date.now();
  if (kind === 'until') return d >= 0 ? `in ${duration(d)}` : `ended ${duration(-d)} ago`;
  return duration(Math.max(0, -d));
}

/** Rewrites every relative time on the page (the shell calls it each second). */
export function tick() {
  for (const el of document.querySelectorAll('span.rel')) {
    el.textContent = relText(Number(el.dataset.wall), el.dataset.kind);
  }
}
