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

/** A table: `columns` as [label, numeric?], `rows` as arrays of cells. */
export function table(caption, columns, rows) {
  return h('table', {},
    h('caption', { class: 'muted' }, caption),
    h('thead', {}, h('tr', {}, columns.map(([label, num]) =>
      h('th', { scope: 'col', class: num ? 'num' : undefined }, label)))),
    h('tbody', {}, rows.length
      ? rows.map((cells) => h('tr', {}, cells.map((cell, i) =>
        h('td', { 'data-label': columns[i][0], class: columns[i][1] ? 'num' : undefined }, cell))))
      : h('tr', {}, h('td', { colspan: columns.length, class: 'muted' }, 'none'))));
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
