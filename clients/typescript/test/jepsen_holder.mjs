// A permit holder of the partition harness (`weir-jepsen --ts-holders N`), written the way
// an application holds permits with this client, recording what it believed. The
// TypeScript twin of clients/python/tests/jepsen_holder.py, whose doc it follows:
//
// The harness starts one of these per TypeScript holder, as a process of its own beside
// its Rust holders on the same limit, and reads its history from stdout: one JSON object
// per line, in the harness's op format (process, kind, f, value, time_ns). Times are on the
// harness's clock: this process is given the harness's start on CLOCK_BOOTTIME
// (--epoch-boot-ns) and counts from it on the clock the client keeps its belief deadline
// on (`bootNowMs`, read on CLOCK_BOOTTIME by `bootClockNs`), so a recorded deadline is the
// client's own.
//
// Each turn: open a session (again after one ends), acquire one unit of the limit (waiting
// at most 5 s), hold it for a seeded time in 10 ms steps, each raced against `permit.lost`
// and preceded by `permit.lostReason()`, then release. Recorded: the `acquire` op (invoke;
// ok with the fence and the invoke time, fail or info), the `hold` fact (the belief as the
// application saw it: from the grant to the moment the client first told it the permit
// may be lost, `told_ns`, or to the release being sent; beside it the client's own
// deadline), and the `release` op. With --pause-every K, every K-th permit is held through
// a stop-the-world pause (a blocking wait: the event loop, keep-alives included, stands
// still), recorded as a `client-pause` fact; its hold is recorded to the deadline with
// "application": false and judged by `told` from the resume. Not told at the resume, it
// works on for a TTL before it releases, as an application that believes it holds would.
//
// The run ends when stdin closes: the holder releases what it holds, closes its session
// and exits.

import * as weir from '../dist/index.js';

/** Longest an acquire waits before it is recorded as failed and asked again (ms). */
const ACQUIRE_WAIT_MS = 5000;
/** Longest a release is waited for before it is recorded as of unknown outcome (ms). */
const RELEASE_WAIT_MS = 3000;
/** One step of work between two checks of the permit (ms). */
const STEP_MS = 10;

function parse(argv) {
  const a = { tenant: 'jepsen', seed: 1, ttlMs: 3000, holdMs: [10, 150], pauseEvery: 0, pauseMs: [4000, 5500] };
  const range = (t) => { const [lo, hi] = t.split(','); return [Number(lo), Number(hi ?? lo)]; };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, v] = [argv[i], argv[i + 1]];
    switch (flag) {
      case '--servers': a.servers = v.split(',').filter(Boolean); break;
      case '--tenant': a.tenant = v; break;
      case '--limit': a.limit = v; break;
      case '--cap': a.cap = Number(v); break;
      case '--process': a.process = Number(v); break;
      case '--seed': a.seed = Number(v); break;
      case '--epoch-boot-ns': a.epochBootNs = Number(v); break;
      case '--ttl-ms': a.ttlMs = Number(v); break;
      case '--hold-ms': a.holdMs = range(v); break;
      case '--pause-every': a.pauseEvery = Number(v); break;
      case '--pause-ms': a.pauseMs = range(v); break;
      default: throw new Error(`unknown argument ${flag}`);
    }
  }
  for (const k of ['servers', 'limit', 'cap', 'process', 'epochBootNs']) {
    if (a[k] === undefined) throw new Error(`missing --${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`);
  }
  return a;
}

/** A seeded generator (mulberry32): the same seed holds the same times. */
function rng(seed) {
  let s = seed >>> 0;
  const next = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { uniform: (lo, hi) => lo + (hi - lo) * next(), int: (lo, hi) => lo + Math.floor((hi - lo + 1) * next()) };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class History {
  constructor(process, epochBootNs) { this.process = process; this.epoch = epochBootNs; }
  /** The harness time of a reading of `weir.bootNowMs()` (at least 0). */
  ns(bootMs) { return Math.max(0, weir.bootClockNs(bootMs) - this.epoch); }
  now() { return this.ns(weir.bootNowMs()); }
  record(kind, f, value, at = this.now()) {
    process.stdout.write(`${JSON.stringify({ process: this.process, kind, f, value, time_ns: at })}\n`);
    return at;
  }
}

class Holder {
  constructor(args, client, stopped) {
    this.a = args;
    this.client = client;
    this.stopped = stopped;
    this.h = new History(args.process, args.epochBootNs);
    this.rng = rng(args.seed);
    this.held = 0;
    this.resumed = null;
  }

  async run() {
    while (!this.stopped()) {
      let session;
      try {
        session = await this.client.session({ ttlMs: this.a.ttlMs });
      } catch (e) {
        if (!(e instanceof weir.WeirError)) throw e;
        await sleep(100);
        continue;
      }
      try {
        while (!this.stopped() && await this.turn(session)) { /* next turn */ }
      } finally {
        await Promise.race([session.close().catch(() => undefined), sleep(RELEASE_WAIT_MS)]);
      }
    }
  }

  /** One acquire, hold and release; false when the session is done for. */
  async turn(session) {
    const limit = this.a.limit;
    const invoked = this.h.record('invoke', 'acquire', { limit });
    process.stderr.write(`${invoked} acquire in session ${session.id}\n`);
    let permit;
    try {
      permit = await session.acquire(limit, { timeoutMs: ACQUIRE_WAIT_MS });
    } catch (e) {
      if (e instanceof weir.TimedOut) {
        this.h.record('fail', 'acquire', { limit, error: 'timed out' });
        return true;
      }
      if (e instanceof weir.SessionLost) {
        this.h.record('fail', 'acquire', { limit, error: 'session lost' });
        return false;
      }
      if (!(e instanceof weir.WeirError)) throw e;
      // Refused (nothing held) or outcome unknown: either way a new session.
      this.h.record(e instanceof weir.Refused ? 'fail' : 'info', 'acquire', { limit, error: String(e.message) });
      return false;
    }
    const granted = this.h.record('ok', 'acquire', { limit, fence: permit.fence, invoke_ns: invoked });
    this.held += 1;
    const pause = this.a.pauseEvery > 0 && this.held % this.a.pauseEvery === 0;
    const lost = await this.work(session, permit, pause);
    this.beliefEnded(session, permit, granted, lost, pause);
    await this.release(permit);
    return session.ended === null;
  }

  /** Holds the permit for a seeded time in steps, each raced against `lost` and preceded
   * by `lostReason()`; answers why the permit was lost, if it was. */
  async work(session, permit, pause) {
    let steps = Math.max(1, Math.round(this.rng.uniform(...this.a.holdMs) / STEP_MS));
    this.resumed = null;
    let lostNow = null;
    permit.lost.then((why) => { lostNow = why; });
    for (let i = 0; i < steps; i++) {
      let why = permit.lostReason();
      if (why !== null) return why;
      if (pause && i === Math.floor(steps / 2)) {
        pause = false; // once a hold: a second pause would hide what the first resume told
        why = this.stall(session, permit);
        if (why !== null) return why;
        steps = i + 1 + Math.round(this.a.ttlMs / STEP_MS);
      }
      await Promise.race([sleep(STEP_MS), permit.lost]);
      if (lostNow !== null) return lostNow;
    }
    return permit.lostReason();
  }

  /** A stop-the-world pause of the whole process (a blocking wait: the event loop stands
   * still), then a look at the permit, recorded. */
  stall(session, permit) {
    const ms = this.rng.int(...this.a.pauseMs);
    const deadline = this.h.ns(session.deadlineMs);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
    const resumed = this.resumed = this.h.now();
    const why = permit.lostReason();
    this.h.record('ok', 'client-pause', {
      limit: this.a.limit, fence: permit.fence, ms, deadline_ns: deadline,
      resumed_ns: resumed, lost: why === null ? null : weir.describeLost(why),
    }, resumed);
    return why;
  }

  beliefEnded(session, permit, granted, lost, paused) {
    const seen = this.h.now();
    const deadline = this.h.ns(session.deadlineMs);
    const to = Math.max(granted, paused ? Math.min(seen, deadline) : seen);
    this.h.record('ok', 'hold', {
      limit: this.a.limit, cap: this.a.cap, fence: permit.fence,
      from_ns: granted, to_ns: to, seen_ns: seen, deadline_ns: deadline,
      told_ns: lost === null ? null : seen, lost: lost === null ? null : weir.describeLost(lost),
      application: !paused, resumed_ns: paused ? this.resumed : null, client: 'typescript',
    }, seen);
  }

  async release(permit) {
    const v = { limit: this.a.limit, fence: permit.fence };
    this.h.record('invoke', 'release', v);
    const done = await Promise.race([permit.release().then(() => 'ok', () => 'info'), sleep(RELEASE_WAIT_MS).then(() => 'info')]);
    this.h.record(done, 'release', v);
  }
}

async function main() {
  const args = parse(process.argv.slice(2));
  if (weir.CLOCK_NAME === 'monotonic' || weir.bootClockNs() === null) {
    process.stderr.write('jepsen_holder: the harness\'s clock is CLOCK_BOOTTIME, which this platform lacks\n');
    return 2;
  }
  let stop = false;
  process.stdin.on('data', () => undefined);
  process.stdin.on('end', () => { stop = true; });
  process.stdin.on('error', () => { stop = true; });
  // The client's own account goes to stderr (the harness keeps it as ts-holder-N.log),
  // stamped on the history's clock.
  const history = new History(args.process, args.epochBootNs);
  const log = (m) => process.stderr.write(`${history.now()} ${m}\n`);
  const client = new weir.Client({ servers: args.servers, tenant: args.tenant, log });
  try {
    await new Holder(args, client, () => stop).run();
  } finally {
    await client.close();
  }
  return 0;
}

process.exitCode = await main();
