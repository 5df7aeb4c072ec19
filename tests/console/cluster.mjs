// A real three-node Weir cluster for the console tests: the `weir` binary (WEIR_BIN, default
// target/debug/weir) run as `weir serve --config nodeN.toml`, configs written here into one
// temporary directory, on ports this process picks. Every wait is bounded; every node is
// killed and the directory removed by `close()` (and on exit, should a test throw).
//
// Ports go into a config before the node starts, so they cannot be the kernel's pick at bind
// time. A port from the ephemeral range may be handed to an outgoing connection before the
// node binds it, so ports are taken below that range, each checked by binding it once, and
// never handed out twice in a process (the same rule as crates/weir-launcher/src/ports.rs).

import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, openSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', '..');
export const WEIR = process.env.WEIR_BIN ?? path.join(ROOT, 'target', 'debug', 'weir');

/** How long a cluster may take to elect a leader and be ready, ms. */
const READY_WAIT_MS = 60_000;
const POLL_MS = 100;

const live = new Set();
process.on('exit', () => { for (const p of live) { try { p.kill('SIGKILL'); } catch { /* gone */ } } });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function ephemeralStart() {
  try { return Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').split(/\s+/)[0]); } catch { return 32768; }
}

const PORT_MIN = 21_000;
const span = Math.max(1024, ephemeralStart() - PORT_MIN);
let nextPort = PORT_MIN + ((process.pid * 997) % span);
const given = new Set();

function bindable(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** A port below the ephemeral range, bindable now, not handed out before. */
export async function freePort() {
  for (let i = 0; i < span; i++) {
    const port = PORT_MIN + ((nextPort++ - PORT_MIN) % span);
    if (!given.has(port) && await bindable(port)) { given.add(port); return port; }
  }
  throw new Error('no free port on 127.0.0.1');
}

const sha256 = (s) => createHash('sha256').update(s).digest('hex');

export class Cluster {
  /** `tokens`: secret -> role, written as [[tokens]] (none: no authentication); `extra`:
   * top-level TOML lines laid into every node's config (`groups = 2`). */
  static async start(tokens = {}, extra = []) {
    const c = new Cluster(tokens, extra);
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

  constructor(tokens, extra = []) {
    this.dir = mkdtempSync(path.join(tmpdir(), 'weir-console-'));
    this.tokens = tokens;
    this.extra = extra;
    this.nodes = [];
    this.background = [];
  }

  adminToken() {
    return Object.entries(this.tokens).find(([, role]) => role === 'admin')?.[0];
  }

  async configure() {
    for (let id = 1; id <= 3; id++) {
      this.nodes.push({ id, client: await freePort(), peer: await freePort(), http: await freePort(), proc: null });
    }
    for (const n of this.nodes) {
      const lines = [
        `id = ${n.id}`, `data_dir = ${JSON.stringify(path.join(this.dir, `data${n.id}`))}`,
        `client_addr = "127.0.0.1:${n.client}"`, `peer_addr = "127.0.0.1:${n.peer}"`,
        `http_listen = "127.0.0.1:${n.http}"`, ...this.extra, '',
      ];
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
    this.node(id).proc = proc;
  }

  node(id) { return this.nodes[id - 1]; }

  url(id) { return `http://127.0.0.1:${this.node(id).http}`; }

  servers() { return this.nodes.filter((n) => n.proc).map((n) => `127.0.0.1:${n.client}`).join(','); }

  async kill(id) {
    const p = this.node(id).proc;
    if (!p) return;
    const gone = new Promise((r) => p.once('exit', r));
    p.kill('SIGKILL');
    await Promise.race([gone, sleep(10_000)]);
    live.delete(p);
    this.node(id).proc = null;
  }

  /** `method path` on node `id` with the admin token (or `token`); the status and JSON. */
  async http(id, method, p, body, token = this.adminToken()) {
    const headers = { 'Content-Type': 'application/json' };
    if (token) headers.Authorization = `Bearer ${token}`;
    const r = await fetch(this.url(id) + p, { method, headers, body: body ? JSON.stringify(body) : undefined });
    let json = null;
    try { json = await r.json(); } catch { json = null; }
    return { status: r.status, json };
  }

  /** The leader's id, once every running node is ready (bounded). */
  async leader(withinMs = READY_WAIT_MS) {
    const deadline = Date.now() + withinMs;
    let last = 'no answer';
    while (Date.now() < deadline) {
      const running = this.nodes.filter((n) => n.proc);
      try {
        const ready = await Promise.all(running.map((n) => fetch(`${this.url(n.id)}/readyz`).then((r) => r.ok)));
        const { status, json } = await this.http(running[0].id, 'GET', '/v1/status');
        const lead = json?.leader;
        const leading = json?.nodes?.find((m) => m.id === lead)?.state === 'Leader';
        if (ready.every(Boolean) && running.some((n) => n.id === lead) && leading) return lead;
        last = `${status} ${JSON.stringify(json)}`;
      } catch (e) { last = String(e); }
      await sleep(POLL_MS);
    }
    throw new Error(`no leader within ${withinMs} ms: ${last}\n${this.logTails()}`);
  }

  /** Runs the CLI against the cluster; its exit status and output. */
  cli(args, token = this.adminToken()) {
    const env = { ...process.env, WEIR_SERVERS: this.servers() };
    if (token) env.WEIR_TOKEN = token; else delete env.WEIR_TOKEN;
    const r = spawnSync(WEIR, args, { env, encoding: 'utf8', timeout: 30_000 });
    return { code: r.status, out: r.stdout, err: r.stderr };
  }

  /** Starts the CLI in the background (killed by close()). */
  cliBackground(args, token = this.adminToken()) {
    const env = { ...process.env, WEIR_SERVERS: this.servers() };
    if (token) env.WEIR_TOKEN = token;
    const p = spawn(WEIR, args, { env, stdio: 'ignore' });
    live.add(p);
    this.background.push(p);
    return p;
  }

  logTails(lines = 15) {
    return this.nodes.map((n) => {
      let text = '';
      try { text = readFileSync(path.join(this.dir, `node${n.id}.log`), 'utf8').split('\n').slice(-lines).join('\n'); } catch { /* none */ }
      return `--- node ${n.id} ---\n${text}`;
    }).join('\n');
  }

  async close() {
    for (const p of this.background) { p.kill('SIGKILL'); live.delete(p); }
    for (const n of this.nodes) await this.kill(n.id);
    rmSync(this.dir, { recursive: true, force: true });
  }
}
