// The TypeScript client's conformance driver: runs every scenario of the repository's
// tests/conformance/scenarios.json (or the file given as the first argument) with this
// client library against real three-node clusters of $WEIR_BIN, one plain and one secure,
// each started when a scenario first needs it. Prints one line per scenario,
// `conformance typescript <name>: pass|fail|skip (<reason>)`, and exits 1 if any fails.
// Each scenario works in the tenant named after it; a scenario with "proxied": true reaches
// the nodes through TCP proxies of this driver's, which `freeze_keepalives` cuts.

import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import * as weir from '../dist/index.js';
import { Cluster, sleep } from './support/cluster.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const FILE = process.argv[2] ?? path.join(ROOT, 'tests', 'conformance', 'scenarios.json');
/** Longest one scenario may run (ms). */
const SCENARIO_MS = 90_000;

const STEPS = new Set(['connect', 'open_session', 'acquire', 'await', 'release', 'settle', 'take', 'set_halt',
  'clear_halt', 'freeze_keepalives', 'expect_held', 'expect_lost', 'expect_limit', 'sleep', 'close']);

/** A TCP proxy on 127.0.0.1 in front of one node's HTTP port; `cut()` stops relaying in
 * both directions without closing anything, as a partition does. */
class Proxy {
  static async start(port) {
    const p = new Proxy(port);
    await new Promise((resolve) => p.server.listen(0, '127.0.0.1', resolve));
    return p;
  }
  constructor(port) {
    this.cutOff = false;
    this.sockets = new Set();
    this.server = net.createServer((down) => {
      const up = net.connect(port, '127.0.0.1');
      for (const s of [down, up]) {
        this.sockets.add(s);
        s.on('error', () => { down.destroy(); up.destroy(); });
        s.on('close', () => { this.sockets.delete(s); down.destroy(); up.destroy(); });
        if (this.cutOff) s.pause();
      }
      down.on('data', (d) => { if (!this.cutOff) up.write(d); });
      up.on('data', (d) => { if (!this.cutOff) down.write(d); });
    });
  }
  get addr() { return `127.0.0.1:${this.server.address().port}`; }
  cut() { this.cutOff = true; for (const s of this.sockets) s.pause(); }
  close() { for (const s of this.sockets) s.destroy(); this.server.close(); }
}

/** The name of a failure as scenarios spell it. */
function kind(e) {
  if (e instanceof weir.Unauthenticated) return 'Unauthorized';
  if (e instanceof weir.TlsUntrusted) return 'TlsUntrusted';
  if (e instanceof weir.Forbidden) return 'Forbidden';
  if (e instanceof weir.TimedOut) return 'TimedOut';
  if (e instanceof weir.Refused) return e.refusal;
  return `${e?.name ?? 'error'}: ${e?.message ?? e}`;
}

class Failed extends Error {}

async function settled(promise) {
  try { return { ok: true, value: await promise }; } catch (error) { return { ok: false, error }; }
}

/** One scenario's run. */
class Run {
  constructor(doc, scenario, cluster, admin) {
    this.doc = doc;
    this.s = scenario;
    this.cluster = cluster;
    this.admin = admin;
    this.tenant = scenario.name;
    this.clients = new Map();
    this.sessions = new Map();
    this.permits = new Map();
    this.background = new Map();
    this.proxies = [];
    this.owned = [];
  }

  client(name) {
    if (name === undefined) return this.clients.get('');
    const c = this.clients.get(name);
    if (!c) throw new Failed(`no client ${name}`);
    return c;
  }

  /** The admin's client for reads and halts, unless the step names a client. */
  operator(step) { return step.client === undefined ? this.admin : this.client(step.client); }

  newClient(options) {
    const c = new weir.Client({ tenant: this.tenant, ...options });
    this.owned.push(c);
    return c;
  }

  async setup() {
    for (const l of this.s.limits ?? []) {
      await this.admin.defineLimit(l.name, {
        tenant: this.tenant, concurrent: l.concurrent ?? 0, perSecond: l.per_second ?? 0,
        ...(l.burst ? { burst: l.burst } : {}), keyed: l.keyed ?? false,
      });
    }
    let servers = this.cluster.servers;
    if (this.s.proxied) {
      this.proxies = await Promise.all(this.cluster.nodes.map((n) => Proxy.start(n.http)));
      servers = this.proxies.map((p) => p.addr);
    }
    this.clients.set('', this.newClient(this.cluster.options({ servers })));
  }

  /** Checks a step's outcome against its `expect` (none: it must succeed). */
  check(step, result) {
    const want = step.expect;
    if (!want || want.outcome === undefined) {
      if (!result.ok) throw new Failed(`${step.do}: ${kind(result.error)}`);
      if (want?.status !== undefined && result.value?.status !== want.status) {
        throw new Failed(`${step.do}: status ${result.value?.status}, want ${want.status}`);
      }
      return;
    }
    if (want.outcome === 'refused') {
      if (result.ok) throw new Failed(`${step.do}: succeeded, want refused ${want.error}`);
      if (kind(result.error) !== want.error) throw new Failed(`${step.do}: ${kind(result.error)}, want ${want.error}`);
      return;
    }
    if (!result.ok) throw new Failed(`${step.do}: ${kind(result.error)}, want ${want.outcome}`);
    if (want.outcome === 'granted') {
      const p = result.value;
      if (!(p instanceof weir.Permit)) throw new Failed(`${step.do}: no permit`);
      if (want.fence_gt !== undefined && !(p.fence > this.permit(want.fence_gt).fence)) {
        throw new Failed(`fence ${p.fence} not above ${want.fence_gt}'s ${this.permit(want.fence_gt).fence}`);
      }
      if (want.same_fence_as !== undefined && p.fence !== this.permit(want.same_fence_as).fence) {
        throw new Failed(`fence ${p.fence}, want ${want.same_fence_as}'s ${this.permit(want.same_fence_as).fence}`);
      }
    }
  }

  permit(name) {
    const p = this.permits.get(name);
    if (!p) throw new Failed(`no permit ${name}`);
    return p;
  }

  session(name) {
    const s = this.sessions.get(name);
    if (!s) throw new Failed(`no session ${name}`);
    return s;
  }

  async step(step) {
    switch (step.do) {
      case 'connect': {
        const token = step.token === undefined ? undefined : this.doc.tokens[step.token].secret;
        const servers = this.cluster.servers.map((s) => `${this.cluster.tls ? 'https' : 'http'}://${s}`);
        this.clients.set(step.as, this.newClient({ servers, ...(step.ca ? { ca: this.cluster.ca } : {}), ...(token ? { token } : {}) }));
        return;
      }
      case 'open_session': {
        const r = await settled(this.client(step.client).session({ ttlMs: step.ttl_ms ?? 3000 }));
        if (r.ok && step.as) this.sessions.set(step.as, r.value);
        this.check(step, r);
        return;
      }
      case 'acquire': {
        const options = { units: step.units ?? 1 };
        if (step.key !== undefined) options.key = step.key;
        if (step.parts) options.parts = step.parts.map((p) => ({ limit: p.limit, units: p.units ?? 1, ...(p.key ? { key: p.key } : {}) }));
        if (step.priority !== undefined) options.priority = step.priority;
        if (step.wait !== undefined) options.wait = step.wait;
        if (step.timeout_ms !== undefined) options.timeoutMs = step.timeout_ms;
        if (step.estimate) options.estimate = true;
        if (step.ticket !== undefined) options.ticket = step.ticket;
        const pending = settled(this.session(step.session).acquire(step.limit, options));
        if (step.background) {
          this.background.set(step.as, pending);
          return;
        }
        const r = await pending;
        if (r.ok && step.as) this.permits.set(step.as, r.value);
        else if (r.ok) await r.value.releaseQuietly();
        this.check(step, r);
        return;
      }
      case 'await': {
        const pending = this.background.get(step.permit);
        if (!pending) throw new Failed(`no background acquire ${step.permit}`);
        const r = await Promise.race([pending, sleep(step.within_ms ?? 10_000).then(() => ({ ok: false, error: new Error('not decided in time') }))]);
        if (r.ok) this.permits.set(step.permit, r.value);
        this.check(step, r);
        return;
      }
      case 'release':
        this.check(step, await settled(this.permit(step.permit).release()));
        return;
      case 'settle':
        this.check(step, await settled(this.permit(step.permit).settle(step.cost)));
        return;
      case 'take': {
        const options = { units: step.units ?? 1 };
        if (step.key !== undefined) options.key = step.key;
        if (step.parts) options.parts = step.parts.map((p) => ({ limit: p.limit, units: p.units ?? 1, ...(p.key ? { key: p.key } : {}) }));
        this.check(step, await settled(this.client(step.client).take(step.limit, options)));
        return;
      }
      case 'set_halt':
        this.check(step, await settled(this.operator(step).setHalt(step.reason ?? 'conformance', { tenant: this.tenant })));
        return;
      case 'clear_halt':
        this.check(step, await settled(this.operator(step).clearHalt({ tenant: this.tenant })));
        return;
      case 'freeze_keepalives':
        if (this.proxies.length === 0) throw new Failed('freeze_keepalives in a scenario that is not proxied');
        for (const p of this.proxies) p.cut();
        return;
      case 'expect_held': {
        const why = this.permit(step.permit).lostReason();
        if (why !== null) throw new Failed(`${step.permit} lost: ${weir.describeLost(why)}`);
        return;
      }
      case 'expect_lost': {
        const lost = await Promise.race([this.permit(step.permit).lost, sleep(step.within_ms ?? 5000).then(() => null)]);
        if (lost === null) throw new Failed(`${step.permit} not reported lost within ${step.within_ms} ms`);
        if (step.reason !== undefined && lost.kind !== step.reason) throw new Failed(`${step.permit} lost for ${lost.kind}, want ${step.reason}`);
        return;
      }
      case 'expect_limit': {
        const until = performance.now() + (step.within_ms ?? 0);
        for (;;) {
          const status = step.key === undefined
            ? await this.operator(step).showLimit(step.limit, { tenant: this.tenant })
            : await this.operator(step).showKey(step.limit, step.key, { tenant: this.tenant });
          const wrong = Object.entries(step.expect ?? {}).filter(([k, v]) => status[k] !== v);
          if (wrong.length === 0) return;
          if (performance.now() >= until) {
            throw new Failed(`${step.limit}${step.key ? `/${step.key}` : ''}: ${wrong.map(([k, v]) => `${k} ${status[k]}, want ${v}`).join('; ')}`);
          }
          await sleep(100);
        }
      }
      case 'sleep':
        await sleep(step.ms ?? 0);
        return;
      case 'close':
        this.check(step, await settled(this.session(step.session).close()));
        return;
      default:
        throw new Failed(`unknown step ${step.do}`);
    }
  }

  async close() {
    await Promise.allSettled(this.owned.map((c) => Promise.race([c.close(), sleep(5000)])));
    for (const p of this.proxies) p.close();
  }
}

async function main() {
  const doc = JSON.parse(readFileSync(FILE, 'utf8'));
  const clusters = {};
  const admins = {};
  async function cluster(kind) {
    if (!clusters[kind]) {
      const secure = kind === 'secure';
      const tokens = {};
      if (secure) for (const t of Object.values(doc.tokens ?? {})) if (t.role) tokens[t.secret] = t.role;
      clusters[kind] = await Cluster.start({ tls: secure, tokens });
      admins[kind] = new weir.Client(clusters[kind].options());
    }
    return clusters[kind];
  }
  let failed = 0;
  try {
    for (const s of doc.scenarios) {
      const unknown = s.steps.map((st) => st.do).filter((d) => !STEPS.has(d));
      if (unknown.length > 0) {
        console.log(`conformance typescript ${s.name}: skip (steps this driver does not know: ${[...new Set(unknown)].join(', ')})`);
        continue;
      }
      if (s.cluster !== 'plain' && s.cluster !== 'secure') {
        console.log(`conformance typescript ${s.name}: skip (cluster ${s.cluster} unknown)`);
        continue;
      }
      const c = await cluster(s.cluster);
      const run = new Run(doc, s, c, admins[s.cluster]);
      let verdict = 'pass';
      try {
        await Promise.race([
          (async () => {
            await run.setup();
            for (const [i, step] of s.steps.entries()) {
              try {
                await run.step(step);
              } catch (e) {
                throw new Failed(`step ${i + 1} (${step.do}): ${e instanceof Failed ? e.message : kind(e)}`);
              }
            }
          })(),
          sleep(SCENARIO_MS).then(() => { throw new Failed(`ran longer than ${SCENARIO_MS} ms`); }),
        ]);
      } catch (e) {
        verdict = `fail (${e instanceof Failed ? e.message : kind(e)})`;
        failed += 1;
      } finally {
        await run.close();
      }
      console.log(`conformance typescript ${s.name}: ${verdict}`);
    }
  } finally {
    for (const a of Object.values(admins)) await a.close();
    for (const c of Object.values(clusters)) await c.close();
  }
  process.exit(failed > 0 ? 1 : 0);
}

await main();
