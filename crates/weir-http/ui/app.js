// The console's shell: the token prompt, who the token is, the views by URL fragment
// (#/cluster, #/limits/TENANT, #/limit/TENANT/NAME, #/tenants/TENANT), and the one event
// stream every view listens to. Views re-read the state when an event concerns them and
// on `resync`; none of them polls.

import { get, onUnauthorized, setToken, token } from './api.js';
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

function onEvent(name, data) {
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

async function start() {
  wireToken();
  try {
    const me = await get('/v1/whoami');
    ctx.role = me.role;
    ctx.node = me.node;
    document.getElementById('who').textContent =
      `node ${me.node} · role ${me.role}${token() ? '' : ' (no token)'}`;
  } catch (e) {
    document.getElementById('who').textContent = `not signed in (${e.message})`;
  }
  window.addEventListener('hashchange', route);
  route();
  if (ctx.role) follow(onEvent, feedState);
  else feedState('off');
}

start();
