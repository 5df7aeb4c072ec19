// Tenants. Without a tenant named (#/tenants): every halt standing across the cluster, with
// since when and a clear button, and every tenant with its halts and run slots (the admin
// and read roles; a tenant token goes to its own tenant). With one (#/tenants/NAME[/PERIOD]):
// a chart of its last 15 minutes, run slots in use against `max_running`, a period's spend
// (the current month unless another is named) against the budget with the holds standing
// on it and the overruns, and its halts — set with a reason and cleared, each after a
// confirmation, offered to the admin role only (the node refuses anyone else whatever the
// page shows). Re-read when an event names the tenant's halts, and on resync.

import { api, get, seg } from './api.js';
import { charts } from './chart.js';
import { bar, clock, debounce, errorBox, h, loading, logClock, relative, show, table } from './dom.js';

/** How often the chart is re-read while shown, ms. */
const CHART_MS = 2000;

/** The current month as a budget period names it (UTC): "2026-12". */
const thisMonth = () => new Date().toISOString().slice(0, 7);

/** A halt's scope in words. */
const scopeText = (x) => (x.scope === 'agent' ? `agent ${x.agent}` : 'whole tenant');

/** The halt's path under `/v1/tenants/{tenant}`. */
const haltPath = (tenant, x) =>
  `/v1/tenants/${seg(tenant)}${x.scope === 'agent' ? `/agents/${seg(x.agent)}` : ''}/halt`;

export function mount(root, ctx, [tenantArg, periodArg]) {
  const own = ctx.role?.startsWith('tenant:') ? ctx.role.slice(7) : null;
  const tenant = tenantArg ?? own ?? '';
  const period = periodArg || thisMonth();
  const tenantInput = h('input', { id: 'tenant-name', value: tenant, required: true });
  const periodInput = h('input', { id: 'tenant-period', value: period, placeholder: 'e.g. 2026-12' });
  const form = h('form', { class: 'inline', onsubmit: (e) => {
    e.preventDefault();
    ctx.tenant = tenantInput.value.trim();
    location.hash = `#/tenants/${seg(ctx.tenant)}/${seg(periodInput.value.trim())}`;
  } },
  h('div', {}, h('label', { for: 'tenant-name' }, 'Tenant'), tenantInput),
  h('div', {}, h('label', { for: 'tenant-period' }, 'Budget period'), periodInput),
  h('button', { type: 'submit' }, 'Show'));
  const body = h('div', { id: 'tenant-body' }, loading());
  const message = h('div', { id: 'tenant-message', role: 'status', 'aria-live': 'polite' });
  if (!tenant) return overview(root, ctx, form, message);
  const chart = h('div', { id: 'tenant-chart' }, loading('loading the last 15 minutes…'));
  show(root, h('p', {}, own ? null : h('a', { href: '#/tenants' }, '← every tenant and halt')),
    h('h1', {}, `Tenant ${tenant}`), form, message, h('h2', {}, 'Last 15 minutes'), chart, body);
  ctx.tenant = tenant;
  const base = `/v1/tenants/${seg(tenant)}`;

  async function load() {
    try {
      const [t, runs, spent, all] = await Promise.all([
        get(base), get(`${base}/runs`), get(`${base}/spent/${seg(period)}`),
        own ? Promise.resolve(null) : get('/v1/halts').catch(() => null),
      ]);
      show(body, slots(t, runs.runs ?? runs), spend(t, spent, period), halts(t.halts, all));
    } catch (e) { show(body, errorBox(e)); }
  }

  async function loadChart() {
    try {
      const answer = await get(`${base}/history`);
      show(chart, charts(answer.history, 'tenant-history'),
        h('p', { class: 'muted' }, `Summed over the limits node ${answer.node} follows; a sample a second, kept for 15 minutes.`));
    } catch (e) { show(chart, errorBox(e)); }
  }

  async function act(text, yes, method, path, payload) {
    if (!await ctx.confirm(text, yes)) return;
    try {
      await api(method, path, payload);
      show(message, h('p', { class: 'ok' }, `${yes}: done`));
    } catch (e) { show(message, errorBox(e)); }
    load();
  }

  function halts(list, all) {
    // Since when: the cluster-wide list carries it (this node's record of the set).
    const lc = all ? logClock(all.now_ms) : null;
    const sinceOf = (x) => {
      const seen = all?.halts.find((y) => y.tenant === tenant && y.scope === x.scope && y.agent === x.agent);
      return seen?.since_ms != null ? [clock(lc.wall(seen.since_ms)), ' (', relative(lc.wall(seen.since_ms), 'since'), ' ago)'] : '—';
    };
    const rows = list.map((x) => [
      scopeText(x), x.reason, sinceOf(x),
      ctx.canHalt ? h('button', { type: 'button', class: 'clear-halt', onclick: () =>
        act(`Clear the halt on ${x.scope === 'agent' ? `agent ${x.agent}` : 'the whole tenant'} of ${tenant}?`,
          'Clear halt', 'DELETE', haltPath(tenant, x)) }, 'Clear') : '—',
    ]);
    return h('section', {}, h('h2', {}, 'Halts'),
      table(`Halts set on ${tenant}`, [['scope'], ['reason'], ['since'], ['action']], rows, `No halts on ${tenant}.`),
      ctx.canHalt ? haltForm() : h('p', { class: 'muted', id: 'halt-read-only' },
        `Halts are set and cleared by the admin role; this token is ${ctx.role ?? 'unknown'}.`));
  }

  function haltForm() {
    const agent = h('input', { id: 'halt-agent', placeholder: 'empty: whole tenant' });
    const reason = h('input', { id: 'halt-reason', required: true, maxlength: 1024 });
    return h('form', { class: 'inline', id: 'halt-form', onsubmit: (e) => {
      e.preventDefault();
      const a = agent.value.trim();
      const scope = a ? `agent ${a}` : 'the whole tenant';
      act(`Halt ${scope} of ${tenant}? Its queued tickets are refused and new acquires refused until cleared.`,
        'Halt', 'PUT', a ? `${base}/agents/${seg(a)}/halt` : `${base}/halt`, { reason: reason.value });
    } },
    h('div', {}, h('label', { for: 'halt-agent' }, 'Agent'), agent),
    h('div', {}, h('label', { for: 'halt-reason' }, 'Reason'), reason),
    h('button', { type: 'submit', class: 'danger', id: 'halt-button' }, 'Halt…'));
  }

  const refresh = debounce(load, 300);
  load();
  loadChart();
  const timer = setInterval(loadChart, CHART_MS);
  return {
    onEvent(kind, e) {
      if (kind === 'resync' || ((kind === 'halt_set' || kind === 'halt_cleared') && e.tenant === tenant)) refresh();
    },
    dispose() { clearInterval(timer); },
  };
}

/** Every halt and every tenant (#/tenants). */
function overview(root, ctx, form, message) {
  const haltsBox = h('div', { id: 'all-halts' }, loading());
  const tenantsBox = h('div', { id: 'all-tenants' }, loading());
  show(root, h('h1', {}, 'Tenants'), form, message,
    h('h2', {}, 'Halts across the cluster'), haltsBox,
    h('h2', {}, 'Tenants'), tenantsBox);

  async function clear(x) {
    const what = `${scopeText(x)} of ${x.tenant}`;
    if (!await ctx.confirm(`Clear the halt on ${what}?`, 'Clear halt')) return;
    try {
      await api('DELETE', haltPath(x.tenant, x));
      show(message, h('p', { class: 'ok' }, `Clear halt on ${what}: done`));
    } catch (e) { show(message, errorBox(e)); }
    load();
  }

  async function load() {
    const [halts, tenants] = await Promise.allSettled([get('/v1/halts'), get('/v1/tenants')]);
    if (halts.status === 'fulfilled') {
      const a = halts.value;
      const lc = logClock(a.now_ms);
      show(haltsBox, table(`${a.total} halt(s) standing, as node ${a.node} knows them`,
        [['tenant'], ['scope'], ['reason'], ['since'], ['action']],
        a.halts.map((x) => [
          h('a', { href: `#/tenants/${seg(x.tenant)}` }, x.tenant), scopeText(x), x.reason,
          x.since_ms != null ? [clock(lc.wall(x.since_ms)), ' (', relative(lc.wall(x.since_ms), 'since'), ' ago)']
            : 'before this node watched',
          ctx.canHalt ? h('button', { type: 'button', class: 'clear-halt', onclick: () => clear(x) }, 'Clear') : '—',
        ]), 'No halts: every tenant may work.'),
      a.total > a.halts.length ? h('p', { class: 'muted' }, `showing ${a.halts.length} of ${a.total}`) : null);
    } else show(haltsBox, errorBox(halts.reason));
    if (tenants.status === 'fulfilled') {
      const t = tenants.value;
      show(tenantsBox, table(`${t.total} tenant(s)`, [['tenant'], ['halts', true], ['running', true], ['max running', true]],
        t.tenants.map((x) => [
          h('a', { href: `#/tenants/${seg(x.name)}` }, x.name),
          x.halts ? h('span', { class: 'bad' }, String(x.halts)) : '0',
          x.running, x.max_running ?? '—',
        ]), 'No tenants yet: a tenant appears when a limit, a ceiling or a halt names it.'),
      t.next != null ? h('p', { class: 'muted' }, `showing the first ${t.tenants.length} of ${t.total}`) : null);
    } else show(tenantsBox, errorBox(tenants.reason));
  }

  const refresh = debounce(load, 300);
  load();
  return {
    onEvent(kind) {
      if (['halt_set', 'halt_cleared', 'defined', 'removed', 'resync'].includes(kind)) refresh();
    },
  };
}

function slots(t, runs) {
  const cap = t.max_running;
  return h('section', {}, h('h2', {}, 'Run slots'),
    h('p', {}, cap != null ? [bar(t.running, cap, `${t.running} of ${cap} run slots`), ` ${t.running} of ${cap} running`]
      : `${t.running} running (no max_running)`),
    table('Runs admitted', [['run'], ['agent'], ['admitted']],
      runs.map((r) => [r.run, r.agent ?? '—', [clock(r.admitted_at_wall_ms), ' (', relative(r.admitted_at_wall_ms, 'since'), ' ago)']]),
      'No runs admitted.'));
}

function spend(t, s, period) {
  const line = (what, used, held, over, budget) => [
    what,
    budget != null ? [bar(used + held, budget, `${used} spent and ${held} held of ${budget}`), ` of ${budget}`] : 'no budget',
    used, held, over ? h('span', { class: 'bad' }, String(over)) : '0',
  ];
  return h('section', {}, h('h2', {}, `Spend in ${period}`),
    table(`Spend of period ${period}`, [['unit'], ['budget'], ['spent', true], ['held', true], ['overrun', true]], [
      line('tokens', s.tokens, s.held_tokens ?? 0, s.overrun_tokens ?? 0, t.budget_tokens),
      line('minor units', s.minor_units, s.held_minor ?? 0, s.overrun_minor ?? 0, t.budget_minor),
    ]));
}
