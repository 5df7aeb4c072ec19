// Cluster view: every node's role, term, applied index and lag, whether replicas at the
// same applied index agree on the state's digest, readiness (the rule of /readyz), and the
// leader's history: the leader changes the node serving this page recorded since it started
// (`leader_history` of /v1/status, so elections before the page was opened count), with the
// elections of the last hour (terms in which a leader was known); before the first status
// read, or for a tenant token (status is the admin and read roles'), the changes this page
// saw itself. The leader line follows
// the event stream at once; the node table and the record are re-read on a leader change, on
// resync, and every few seconds while shown (one request for the whole cluster, not one per
// limit).

import { get } from './api.js';
import { clock, debounce, errorBox, h, show, table } from './dom.js';

/** How often the node table is re-read while this view is shown, ms. */
const REFRESH_MS = 5000;

export function mount(root, ctx) {
  const leaderLine = h('p', { id: 'leader', 'aria-live': 'polite' });
  const nodes = h('div', { id: 'nodes' }, h('p', { class: 'muted' }, 'loading…'));
  const history = h('div', { id: 'leader-history' });
  show(root, h('h1', {}, 'Cluster'), leaderLine, nodes, history);

  const drawLeader = () => {
    leaderLine.textContent = ctx.leader == null
      ? `No leader known to node ${ctx.node ?? '?'} (term ${ctx.term ?? '?'})`
      : `Leader: node ${ctx.leader} · term ${ctx.term}`;
    leaderLine.dataset.leader = ctx.leader ?? '';
    drawHistory();
  };

  // The node's own record once read, else what this page saw.
  let record = null;
  const drawHistory = () => {
    const changes = record?.changes ?? ctx.leaders;
    const hour = Date.now() - 3600_000;
    const elected = new Set(changes.filter((l) => l.at_ms >= hour && l.leader != null).map((l) => l.term));
    const whose = record ? `node ${record.node} recorded since it started` : 'this page saw';
    show(history,
      h('h2', {}, 'Leader history'),
      h('p', { id: 'elections' }, `Elections in the last hour: ${elected.size} (as ${whose})`),
      table(`Leader changes ${whose}, newest first`, [['at'], ['leader'], ['term', true]],
        changes.map((l) => [clock(l.at_ms), l.leader == null ? 'none' : `node ${l.leader}`, l.term])));
  };

  const load = async () => {
    try {
      const status = await get('/v1/status');
      show(nodes, nodeTable(status));
      record = status.leader_history ?? null;
      drawHistory();
    } catch (e) {
      show(nodes, errorBox(e.status === 403
        ? new Error(`The node table needs the admin or read role (${e.message}); the leader above is live.`)
        : e));
    }
  };
  const refresh = debounce(load, 300);
  drawLeader();
  load();
  const timer = setInterval(load, REFRESH_MS);
  return {
    onEvent(name) {
      if (name === 'hello' || name === 'leader') { drawLeader(); refresh(); }
      if (name === 'resync') refresh();
    },
    dispose() { clearInterval(timer); },
  };
}

function nodeTable(status) {
  const byApplied = new Map();
  for (const n of status.nodes) {
    if (n.digest === undefined) continue;
    const digests = byApplied.get(n.digest_applied) ?? new Set();
    digests.add(n.digest);
    byApplied.set(n.digest_applied, digests);
  }
  const leader = status.nodes.find((n) => n.id === status.leader && n.last_log_index !== undefined);
  const rows = status.nodes.map((n) => {
    if (n.digest === undefined) {
      return [`node ${n.id}`, h('span', { class: 'bad' }, n.state), '', '', '', '', n.addr];
    }
    const lag = (leader ?? n).last_log_index - n.applied;
    // A digest is of the state at `digest_applied`: only replicas at the same index compare.
    const peers = byApplied.get(n.digest_applied);
    const agree = peers.size > 1
      ? h('span', { class: 'bad' }, `DIFFERS at ${n.digest_applied}`)
      : h('span', { class: 'ok' }, `agrees at ${n.digest_applied} (${n.digest.slice(0, 12)})`);
    const ready = n.ready ? h('span', { class: 'ok' }, 'ready') : h('span', { class: 'bad' }, 'not ready');
    return [`node ${n.id}`, n.state, n.term, n.applied, Math.max(0, lag), [agree], [ready, ' ', h('span', { class: 'muted' }, n.ready_reason ?? '')]];
  });
  return table('Nodes, as this node sees them', [['node'], ['role'], ['term', true], ['applied', true],
    ['lag', true], ['digest'], ['/readyz']], rows);
}
