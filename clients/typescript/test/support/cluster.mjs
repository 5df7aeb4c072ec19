// A real three-node Weir cluster for the TypeScript client's tests and conformance driver:
// the `weir` binary (WEIR_BIN, default ../../target/debug/weir from this package) run as
// `weir serve --config nodeN.toml`, configs written here into one temporary directory, on
// ports this process picks; with `tls`, certificates from `weir certs init`; with `tokens`
// (secret -> role), [[tokens]]. Every wait is bounded; every node is killed and the
// directory removed by close() (and on exit, should a test throw).
//
// Ports go into a config before the node starts, so they cannot be the kernel's pick at bind
// time: they are taken below the ephemeral range, each checked by binding it once, never
// handed out twice in a process (the rule of crates/weir-launcher/src/ports.rs).

import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const WEIR = path.resolve(process.env.WEIR_BIN ?? path.join(PACKAGE, '..', '..', 'target', 'debug', 'weir'));

/** How long a cluster may take to elect a leader and be ready (ms): a debug build on a
 * loaded two-core machine needs a few seconds. */
const READY_WAIT_MS = 60_000;
const POLL_MS = 100;

const live = new Set();
process.on('exit', () => {
  for (const p of live) {
    try { process.kill(p.pid, 'SIGCONT'); p.kill('SIGKILL'); } catch { /* gone */ }
  }
});

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function ephemeralStart() {
  try { return Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').split(/\s+/)[0]); } catch { return 32768; }
}

const PORT_MIN = 22_000;
const span = Math.max(1024, ephemeralStart() - PORT_MIN);
let nextPort = PORT_MIN + ((process.pid * 991) % span);
const given = new Set();

function bindable(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

async function freePort() {
  for (let i = 0; i < span; i++) {
    const port = PORT_MIN + ((nextPort++ - PORT_MIN) % span);
    if (!given.has(port) && await bindable(port)) { given.add(port); return port; }
  }
  throw new Error('no free port on 127.0.0.1');
}

const sha256 = (s) => createHash('sha256').update(s).digest('hex');

export class Cluster {
  /** Starts three nodes and waits for a leader. */
  static async start({ tls = false, tokens = {}, extra = [] } = {}) {
    if (!existsSync(WEIR)) throw new Error(`no weir binary at ${WEIR}: build it (cargo build) or set WEIR_BIN`);
    const c = new Cluster(tls, tokens, extra);
    try {
      await c.configure();
      for (const n of c.nodes) c.startNode(n.id);
      await c.leader();
    } catch (e) {
      await c.close();
      throw e;
    }
    return c;
  }

  constructor(tls, tokens, extra = []) {
    this.dir = mkdtempSync(path.join(tmpdir(), 'weir-ts-'));
    this.tls = tls;
    this.tokens = tokens;
    /** Top-level TOML lines laid into every node's config (`groups = 2`). */
    this.extra = extra;
    this.nodes = [];
  }

  get ca() { return this.tls ? path.join(this.dir, 'certs', 'ca.pem') : undefined; }

  /** Every node's HTTP address, in id order. */
  get servers() { return this.nodes.map((n) => `127.0.0.1:${n.http}`); }

  adminToken() { return Object.entries(this.tokens).find(([, role]) => role === 'admin')?.[0]; }

  /** Client options for this cluster (the admin token unless told). */
  options(extra = {}) {
    const o = { servers: this.servers };
    if (this.ca) o.ca = this.ca;
    const token = this.adminToken();
    if (token) o.token = token;
    return { ...o, ...extra };
  }

  async configure() {
    if (this.tls) {
      const r = spawnSync(WEIR, ['certs', 'init', path.join(this.dir, 'certs')], { encoding: 'utf8', timeout: 60_000 });
      if (r.status !== 0) throw new Error(`weir certs init: ${r.stderr}`);
    }
    for (let id = 1; id <= 3; id++) {
      this.nodes.push({ id, client: await freePort(), peer: await freePort(), http: await freePort(), proc: null, paused: false });
    }
    for (const n of this.nodes) {
      const lines = [
        `id = ${n.id}`, `data_dir = ${JSON.stringify(path.join(this.dir, `data${n.id}`))}`,
        `client_addr = "127.0.0.1:${n.client}"`, `peer_addr = "127.0.0.1:${n.peer}"`,
        `http_listen = "127.0.0.1:${n.http}"`, ...this.extra, '',
      ];
      if (this.tls) {
        const certs = path.join(this.dir, 'certs');
        lines.push('[tls]', `cert = ${JSON.stringify(path.join(certs, `node${n.id}.pem`))}`,
          `key = ${JSON.stringify(path.join(certs, `node${n.id}.key`))}`, `ca = ${JSON.stringify(path.join(certs, 'ca.pem'))}`, '');
      }
      for (const [secret, role] of Object.entries(this.tokens)) {
        lines.push('[[tokens]]', `sha256 = "${sha256(secret)}"`, `role = ${JSON.stringify(role)}`, '');
      }
      for (const p of this.nodes) {
        lines.push('[[peers]]', `id = ${p.id}`, `peer = "127.0.0.1:${p.peer}"`, `client = "127.0.0.1:${p.client}"`, '');
      }
      writeFileSync(path.join(this.dir, `node${n.id}.toml`), lines.join('\n'));
    }
  }

  startNode(id) {
    const log = openSync(path.join(this.dir, `node${id}.log`), 'a');
    const proc = spawn(WEIR, ['serve', '--config', path.join(this.dir, `node${id}.toml`)], {
      cwd: this.dir, stdio: ['ignore', 'ignore', log], env: { ...process.env, RUST_LOG: 'info,openraft=warn' },
    });
    live.add(proc);
    Object.assign(this.node(id), { proc, paused: false });
  }

  node(id) { return this.nodes[id - 1]; }

  url(id) { return `${this.tls ? 'https' : 'http'}://127.0.0.1:${this.node(id).http}`; }

  async kill(id) {
    const n = this.node(id);
    const p = n.proc;
    if (!p) return;
    if (p.exitCode === null && p.signalCode === null) {
      const gone = new Promise((r) => p.once('exit', r));
      try { process.kill(p.pid, 'SIGCONT'); } catch { /* gone */ }
      p.kill('SIGKILL');
      await Promise.race([gone, sleep(10_000)]);
    }
    live.delete(p);
    n.proc = null;
    n.paused = false;
  }

  pause(id) { process.kill(this.node(id).proc.pid, 'SIGSTOP'); this.node(id).paused = true; }

  resume(id) { const n = this.node(id); if (n.proc) process.kill(n.proc.pid, 'SIGCONT'); n.paused = false; }

  /** `method path` on node `id` with the admin token (or `token`): {status, json}. */
  request(id, method, p, body, token = this.adminToken()) {
    const headers = { 'content-type': 'application/json' };
    if (token) headers.authorization = `Bearer ${token}`;
    const mod = this.tls ? https : http;
    const options = { method, headers, timeout: 5000 };
    if (this.tls) options.ca = readFileSync(this.ca);
    return new Promise((resolve, reject) => {
      const req = mod.request(this.url(id) + p, options, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c) => { text += c; });
        res.on('end', () => {
          let json = null;
          try { json = JSON.parse(text); } catch { json = null; }
          resolve({ status: res.statusCode, json });
        });
      });
      req.on('timeout', () => req.destroy(new Error('timed out')));
      req.on('error', reject);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  }

  /** The leader's id, once every running, unpaused node is ready (bounded). */
  async leader(withinMs = READY_WAIT_MS) {
    const deadline = Date.now() + withinMs;
    let last = 'no answer';
    while (Date.now() < deadline) {
      const running = this.nodes.filter((n) => n.proc && !n.paused);
      try {
        const ready = await Promise.all(running.map((n) => this.request(n.id, 'GET', '/readyz').then((r) => r.status === 200)));
        const { status, json } = await this.request(running[0].id, 'GET', '/v1/status');
        const lead = json?.leader;
        const leading = json?.nodes?.find((m) => m.id === lead)?.state === 'Leader';
        if (ready.every(Boolean) && running.some((n) => n.id === lead) && leading) return lead;
        last = `${status} ${JSON.stringify(json)}`;
      } catch (e) { last = String(e); }
      await sleep(POLL_MS);
    }
    throw new Error(`no leader within ${withinMs} ms: ${last}\n${this.logTails()}`);
  }

  logTails(lines = 15) {
    return this.nodes.map((n) => {
      let text = '';
      try { text = readFileSync(path.join(this.dir, `node${n.id}.log`), 'utf8').split('\n').slice(-lines).join('\n'); } catch { /* none */ }
      return `--- node ${n.id} ---\n${text}`;
    }).join('\n');
  }

  async close() {
    for (const n of this.nodes) await this.kill(n.id);
    rmSync(this.dir, { recursive: true, force: true });
  }
}
