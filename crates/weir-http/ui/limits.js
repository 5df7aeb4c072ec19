// Limits of a tenant: kind (concurrency, rate, keyed), units in use against the cap as a
// bar, waiters, tokens, live keys of keyed limits, shadow and removal marks; filtered by name prefix and paged by the
// node (`?prefix=&after=&limit=`, answered `{"limits": [...], "next": NAME|null}`), so a
// tenant of 100,000 limits costs one page per look. Re-read when an event names the tenant.

import { get, seg } from './api.js';
import { bar, debounce, errorBox, h, loading, show, table } from './dom.js';

/** Limits on one page. */
const PAGE = 50;

/** Events after which the page re-reads its rows. */
const CHANGES = new Set(['granted', 'released', 'queued', 'refused', 'expired', 'defined', 'removed', 'resync']);

export function mount(root, ctx, [tenantArg]) {
  const tenant = tenantArg ?? ctx.tenant;
  const state = { prefix: '', after: null, before: [] };
  const rows = h('div', { id: 'limit-rows' }, loading());
  const pager = h('div', { class: 'pager' });
  const tenantInput = h('input', { id: 'limits-tenant', name: 'tenant', value: tenant, required: true });
  const prefixInput = h('input', { id: 'limits-prefix', name: 'prefix', placeholder: 'name prefix' });
  const form = h('form', { class: 'inline', onsubmit: (e) => {
    e.preventDefault();
    const t = tenantInput.value.trim();
    if (t !== tenant) { ctx.tenant = t; location.hash = `#/limits/${seg(t)}`; return; }
    Object.assign(state, { prefix: prefixInput.value, after: null, before: [] });
    load();
  } },
  h('div', {}, h('label', { for: 'limits-tenant' }, 'Tenant'), tenantInput),
  h('div', {}, h('label', { for: 'limits-prefix' }, 'Filter'), prefixInput),
  h('button', { type: 'submit' }, 'Show'));
  show(root, h('h1', {}, tenant ? `Limits of ${tenant}` : 'Limits'), form, rows, pager);
  if (!tenant) {
    show(rows, h('p', {}, 'Name a tenant to see its limits, or pick one from ', h('a', { href: '#/tenants' }, 'the list of tenants'), '.'));
    return {};
  }
  ctx.tenant = tenant;

  async function load() {
    const q = new URLSearchParams({ prefix: state.prefix, limit: String(PAGE) });
    if (state.after != null) q.set('after', state.after);
    try {
      const page = pageOf(await get(`/v1/tenants/${seg(tenant)}/limits?${q}`), state);
      show(rows, limitTable(tenant, page.limits, state.prefix));
      drawPager(page.next);
    } catch (e) { show(rows, errorBox(e)); }
  }

  function drawPager(next) {
    const prev = h('button', { type: 'button', disabled: !state.before.length, onclick: () => {
      state.after = state.before.pop(); load();
    } }, 'Previous page');
    const more = h('button', { type: 'button', disabled: next == null, onclick: () => {
      state.before.push(state.after); state.after = next; load();
    } }, 'Next page');
    show(pager, prev, more);
  }

  const refresh = debounce(load, 400);
  load();
  return {
    onEvent(name, data) {
      if (CHANGES.has(name) && (data.tenant == null || data.tenant === tenant)) refresh();
    },
  };
}

/** The node's page; an answer that is a bare list is paged here the same way. */
function pageOf(answer, state) {
  if (!Array.isArray(answer)) return answer;
  const all = answer.filter((l) => l.name.startsWith(state.prefix))
    .filter((l) => state.after == null || l.name > state.after);
  const limits = all.slice(0, PAGE);
  return { limits, next: all.length > PAGE ? limits[limits.length - 1].name : null };
}

function kindTags(l) {
  const tags = [];
  if (l.concurrent > 0) tags.push('concurrency');
  if (l.per_second > 0) tags.push('rate');
  if (l.keyed) tags.push('keyed');
  if (l.shadow) tags.push('shadow');
  if (l.removing) tags.push('removing');
  return tags.map((t) => h('span', { class: 'tag' }, t));
}

function limitTable(tenant, limits, prefix) {
  const empty = prefix ? `No limit of ${tenant} starts with “${prefix}”.` : `${tenant} has no limits defined.`;
  return table(`Limits of ${tenant}`,
    [['limit'], ['kind'], ['in use'], ['waiting', true], ['tokens', true], ['live keys', true]],
    limits.map((l) => [
      h('a', { href: `#/limit/${seg(tenant)}/${seg(l.name)}` }, l.name),
      kindTags(l),
      l.concurrent > 0
        ? [bar(l.in_use, l.concurrent, `${l.in_use} of ${l.concurrent} in use`), ` ${l.in_use} / ${l.concurrent}`]
        : `${l.in_use}`,
      l.waiting,
      l.per_second > 0 ? `${l.tokens} / ${l.burst}` : '—',
      l.keyed ? l.live_keys : '—',
    ]), empty);
}
