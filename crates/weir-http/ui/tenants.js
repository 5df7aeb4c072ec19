// Tenants: run slots in use against `max_running`, a period's spend against the budget with
// the holds standing on it and the overruns, and halts — set with a reason and cleared,
// each after a confirmation, offered to the admin role only (the node refuses anyone else
// whatever the page shows). Re-read when an event names the tenant's halts, and on resync.

import { api, get, seg } from './api.js';
import { bar, debounce, errorBox, h, show, table } from './dom.js';

export function mount(root, ctx, [tenantArg, periodArg]) {
  const tenant = tenantArg ?? ctx.tenant;
  const period = periodArg ?? sessionStorage.getItem('weir.period') ?? '';
  const tenantInput = h('input', { id: 'tenant-name', value: tenant, required: true });
  const periodInput = h('input', { id: 'tenant-period', value: period, placeholder: 'e.g. 2026-12' });
  const form = h('form', { class: 'inline', onsubmit: (e) => {
    e.preventDefault();
    ctx.tenant = tenantInput.value.trim();
    sessionStorage.setItem('weir.period', periodInput.value.trim());
    location.hash = `#/tenants/${seg(ctx.tenant)}/${seg(periodInput.value.trim())}`;
  } },
  h('div', {}, h('label', { for: 'tenant-name' }, 'Tenant'), tenantInput),
  h('div', {}, h('label', { for: 'tenant-period' }, 'Budget period'), periodInput),
  h('button', { type: 'submit' }, 'Show'));
  const body = h('div', { id: 'tenant-body' });
  const message = h('div', { id: 'tenant-message', role: 'status', 'aria-live': 'polite' });
  show(root, h('h1', {}, tenant ? `Tenant ${tenant}` : 'Tenants'), form, message, body);
  if (!tenant) { show(body, h('p', {}, 'Name a tenant to see its runs, spend and halts.')); return {}; }
  ctx.tenant = tenant;
  const base = `/v1/tenants/${seg(tenant)}`;

  async function load() {
    try {
      const [t, runs, spent] = await Promise.all([
        get(base), get(`${base}/runs`),
        period ? get(`${base}/spent/${seg(period)}`) : Promise.resolve(null),
      ]);
      show(body, slots(t, runs.runs ?? runs), spend(t, spent, period), halts(t.halts));
    } catch (e) { show(body, errorBox(e)); }
  }

  async function act(text, yes, method, path, payload) {
    if (!await ctx.confirm(text, yes)) return;
    try {
      await api(method, path, payload);
      show(message, h('p', { class: 'ok' }, `${yes}: done`));
    } catch (e) { show(message, errorBox(e)); }
    load();
  }

  function halts(list) {
    const pathOf = (x) => (x.scope === 'agent' ? `${base}/agents/${seg(x.agent)}/halt` : `${base}/halt`);
    const rows = list.map((x) => [
      x.scope === 'agent' ? `agent ${x.agent}` : 'whole tenant', x.reason,
      ctx.canHalt ? h('button', { type: 'button', class: 'clear-halt', onclick: () =>
        act(`Clear the halt on ${x.scope === 'agent' ? `agent ${x.agent}` : 'the whole tenant'} of ${tenant}?`,
          'Clear halt', 'DELETE', pathOf(x)) }, 'Clear') : '—',
    ]);
    return h('section', {}, h('h2', {}, 'Halts'),
      table(`Halts set on ${tenant}`, [['scope'], ['reason'], ['action']], rows),
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
  return {
    onEvent(kind, e) {
      if (kind === 'resync' || ((kind === 'halt_set' || kind === 'halt_cleared') && e.tenant === tenant)) refresh();
    },
  };
}

function slots(t, runs) {
  const cap = t.max_running;
  return h('section', {}, h('h2', {}, 'Run slots'),
    h('p', {}, cap != null ? [bar(t.running, cap, `${t.running} of ${cap} run slots`), ` ${t.running} of ${cap} running`]
      : `${t.running} running (no max_running)`),
    table('Runs admitted', [['run'], ['agent'], ['admitted']],
      runs.map((r) => [r.run, r.agent ?? '—', new Date(r.admitted_at_wall_ms).toISOString()])));
}

function spend(t, s, period) {
  if (!period) return h('section', {}, h('h2', {}, 'Spend'), h('p', { class: 'muted' }, 'Name a budget period to see its spend.'));
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
