// The console's shell: the token prompt, who the token is, the views by URL fragment
// (#/cluster, #/limits/TENANT, #/limit/TENANT/NAME, #/tenants[/TENANT[/PERIOD]]), the halt
// banner over every view, and the one event stream every view listens to. Views re-read
// the state when an event concerns them and on `resync`; what changes without an event (a
// chart's samples, the node table) is re-read every few seconds while shown, and relative
// times ("in 2.4 s") are rewritten each second.

import { get, group, onUnauthorized, seg, setGroup, setToken, token } from './api.js';
import { clock, debounce, h, logClock, relative, show, tick } from './dom.js';
import { follow } from './feed.js';
import * as cluster from './cluster.js';
import * as limits from './limits.js';
import * as limit from './limit.js';
import * as tenants from './tenants.js';

const VIEWS = { cluster, limits, limit, tenants };
const main = document.getElementById('main');

/** What the views share. */
const ctx = {
  role: null,
  node: null,
  leader: null,
  term: null,
  /** Leader changes this page saw: {at_ms, leader, term}, newest first, at most 100. */
  leaders: [],
  get canHalt() { return this.role === 'admin'; },
  /** The tenant the views start on: a tenant token's own, else the last one looked at. */
  get tenant() {
    const own = this.role?.startsWith('tenant:') ? this.role.slice(7) : null;
    return own ?? sessionStorage.getItem('weir.tenant') ?? '';
  },
  set tenant(t) { sessionStorage.setItem('weir.tenant', t); },
  confirm,
};

let current = null;

function route() {
  const [name, ...args] = (location.hash.replace(/^#\/?/, '') || 'cluster').split('/').map(decodeURIComponent);
  const view = VIEWS[name] ? name : 'cluster';
  for (const a of document.querySelectorAll('nav a')) {
    const on = a.dataset.view === view || (view === 'limit' && a.dataset.view === 'limits');
    if (on) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  current?.dispose?.();
  current = VIEWS[view].mount(main, ctx, args);
}

/** How often the halt banner is re-read without an event, ms. */
const BANNER_MS = 10_000;

/**
 * The banner over every view while any halt stands: each halt's scope, reason and since
 * when, and a link to its tenant's page, where it is cleared. Read from `GET /v1/halts`
 * (every tenant) for the admin and read roles, from the tenant's own halts for a tenant
 * token.
 */
async function drawBanner() {
  const banner = document.getElementById('halt-banner');
  const own = ctx.role?.startsWith('tenant:') ? ctx.role.slice(7) : null;
  let halts;
  let lc = null;
  let total;
  try {
    if (own) {
      halts = (await get(`/v1/tenants/${seg(own)}/halts`)).halts.map((x) => ({ ...x, tenant: own, since_ms: null }));
      total = halts.length;
    } else {
      const answer = await get('/v1/halts');
      halts = answer.halts;
      total = answer.total;
      lc = logClock(answer.now_ms);
    }
  } catch {
    return; // The views say what failed; the banner shows only what it knows.
  }
  banner.hidden = halts.length === 0;
  if (!halts.length) { banner.replaceChildren(); return; }
  const shown = halts.slice(0, 5);
  show(banner,
    h('strong', {}, total === 1 ? 'A halt is set' : `${total} halts are set`),
    h('ul', {}, shown.map((x) => {
      const scope = x.scope === 'agent' ? `agent ${x.agent} of tenant ${x.tenant}` : `tenant ${x.tenant}`;
      const since = x.since_ms != null && lc
        ? [' · since ', clock(lc.wall(x.since_ms)), ' (', relative(lc.wall(x.since_ms), 'since'), ' ago)']
        : ' · set before this node started watching';
      return h('li', { class: 'halt' }, h('span', { class: 'scope' }, scope), ': ', `“${x.reason}”`, since, ' · ',
        h('a', { href: `#/tenants/${seg(x.tenant)}` }, ctx.canHalt ? 'clear it' : 'see it'));
    })),
    total > shown.length ? h('a', { href: '#/tenants' }, `all ${total} halts`) : null);
}

const redrawBanner = debounce(drawBanner, 300);

function onEvent(name, data) {
  if (name === 'halt_set' || name === 'halt_cleared' || name === 'resync') redrawBanner();
  if (name === 'hello' || name === 'leader') {
    if (data.leader !== ctx.leader || data.term !== ctx.term) {
      ctx.leaders.unshift({ at_ms: Date.now(), leader: data.leader, term: data.term });
      ctx.leaders.length = Math.min(ctx.leaders.length, 100);
    }
    ctx.leader = data.leader;
    ctx.term = data.term;
  }
  current?.onEvent?.(name, data);
}

function feedState(state) {
  const el = document.getElementById('feed-state');
  el.textContent = `events: ${state}`;
  el.className = `feed ${state === 'live' ? 'live' : state === 'down' ? 'down' : ''}`;
}

/** Asks for yes or no in a modal dialog; resolves true on yes. */
function confirm(text, yesLabel = 'Confirm') {
  const dialog = document.getElementById('confirm-dialog');
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-yes').textContent = yesLabel;
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'yes'), { once: true });
  });
}

function askToken(why) {
  const dialog = document.getElementById('token-dialog');
  if (dialog.open) return;
  document.getElementById('token-why').textContent =
    why ? `This node refused the request: ${why}. A token is kept for this tab only.`
      : 'A token is kept for this tab only.';
  document.getElementById('token-input').value = '';
  dialog.showModal();
}

function wireToken() {
  const dialog = document.getElementById('token-dialog');
  document.getElementById('token-form').addEventListener('submit', () => {
    setToken(document.getElementById('token-input').value.trim());
    location.reload();
  });
  document.getElementById('token-forget').addEventListener('click', () => {
    setToken(null);
    dialog.close();
    location.reload();
  });
  document.getElementById('token-button').addEventListener('click', () => askToken());
  onUnauthorized((why) => askToken(why));
}

/** On a node of several Raft groups, a choice of the group every view reads and the event
 * stream follows (kept for the tab); the page is loaded again on a change. */
function offerGroups(me) {
  if (!(me.groups?.length > 1)) return;
  const select = document.getElementById('group-select');
  for (const g of me.groups) {
    const option = document.createElement('option');
    option.value = String(g);
    option.textContent = String(g);
    select.append(option);
  }
  select.value = String(me.group);
  document.getElementById('group-choice').hidden = false;
  select.addEventListener('change', () => {
    setGroup(select.value);
    location.reload();
  });
}

async function start() {
  wireToken();
  try {
    const me = await get('/v1/whoami');
    ctx.role = me.role;
    ctx.node = me.node;
    document.getElementById('who').textContent =
      `node ${me.node} · role ${me.role}${token() ? '' : ' (no token)'}`;
    offerGroups(me);
  } catch (e) {
    if (e.status === 400 && group()) {
      // A group this node does not host (the tab looked at another cluster): the default.
      setGroup(null);
      location.reload();
      return;
    }
    document.getElementById('who').textContent = `not signed in (${e.message})`;
  }
  window.addEventListener('hashchange', route);
  route();
  setInterval(tick, 1000);
  if (ctx.role) {
    drawBanner();
    setInterval(drawBanner, BANNER_MS);
    follow(onEvent, feedState);
  } else feedState('off');
}

start();
