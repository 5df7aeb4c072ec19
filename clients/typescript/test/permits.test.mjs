// Permits, refusals, keys and parts, held costs, halts, runs and settlements, against one
// real three-node cluster shared by the tests of this file (each test in its own tenant).

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import * as weir from '../dist/index.js';
import { Cluster, sleep } from './support/cluster.mjs';

let cluster;
before(async () => { cluster = await Cluster.start(); });
after(async () => { await cluster?.close(); });

/** A client in `tenant`, closed by the caller. */
const client = (tenant) => new weir.Client(cluster.options({ tenant }));

test('a permit is granted with a fence, queues a second holder, and is released', { timeout: 60_000 }, async () => {
  const c = client('grant');
  try {
    await c.defineLimit('db', { concurrent: 1 });
    const s1 = await c.session({ ttlMs: 3000 });
    const s2 = await c.session({ ttlMs: 3000 });
    const p1 = await s1.acquire('db');
    assert.ok(p1.fence > 0);
    assert.equal(p1.lostReason(), null);
    assert.equal(p1.signal.aborted, false);
    const waiting = s2.acquire('db', { timeoutMs: 20_000 });
    await sleep(300);
    assert.equal((await c.showLimit('db')).waiting, 1);
    assert.ok(await c.fenceHeld('db', p1.fence));
    await p1.release();
    const p2 = await waiting;
    assert.ok(p2.fence > p1.fence, `fence ${p2.fence} after ${p1.fence}`);
    assert.equal(await c.fenceHeld('db', p1.fence), false);
    await assert.rejects(s1.acquire('db', { wait: false }), (e) => e instanceof weir.Busy);
    await p2.release();
    assert.equal((await c.showLimit('db')).in_use, 0);
    await s1.close();
    await s2.close();
  } finally {
    await c.close();
  }
});

test('refusals are typed and name their part; a wait times out or aborts and is withdrawn', { timeout: 60_000 }, async () => {
  const c = client('refusals');
  try {
    await c.defineLimit('one', { concurrent: 1 });
    const s = await c.session();
    await assert.rejects(s.acquire('nope'), (e) => e instanceof weir.UnknownLimit && e.part?.limit === 'nope');
    await assert.rejects(s.acquire('one', { units: 2 }), (e) => e instanceof weir.TooLarge && e.max === 1);
    const held = await s.acquire('one');
    await assert.rejects(s.acquire('one', { timeoutMs: 300 }), weir.TimedOut);
    const ctl = new AbortController();
    const aborted = s.acquire('one', { signal: ctl.signal });
    setTimeout(() => ctl.abort(new Error('given up')), 300);
    await assert.rejects(aborted, /given up/);
    await sleep(200);
    assert.equal((await c.showLimit('one')).waiting, 0, 'withdrawn tickets wait no more');
    await held.release();
  } finally {
    await c.close();
  }
});

test('a halt is told to the holder: lost resolves, signal aborts; new acquires are refused', { timeout: 60_000 }, async () => {
  const c = client('halts');
  try {
    await c.defineLimit('gpu', { concurrent: 2 });
    const s = await c.session();
    const p = await s.acquire('gpu', { agent: 'bot' });
    await c.setHalt('runaway', { agent: 'bot' });
    const lost = await Promise.race([p.lost, sleep(5000).then(() => null)]);
    assert.deepEqual(lost, { kind: 'halted', scope: { agent: 'bot' }, reason: 'runaway' });
    assert.ok(p.signal.aborted);
    assert.ok(p.signal.reason instanceof weir.PermitLost);
    await assert.rejects(s.acquire('gpu', { agent: 'bot' }), (e) => e instanceof weir.Halted && e.reason === 'runaway');
    assert.deepEqual(await c.listHalts(), [{ scope: { agent: 'bot' }, reason: 'runaway' }]);
    await c.clearHalt({ agent: 'bot' });
    assert.deepEqual(await c.listHalts(), []);
  } finally {
    await c.close();
  }
});

test('keyed takes, several parts all or none, and a held estimate settled', { timeout: 60_000 }, async () => {
  const c = client('parts');
  try {
    await c.defineLimit('per-user', { perSecond: 1, burst: 2, keysMax: 100 });
    await c.defineLimit('gpu', { concurrent: 1 });
    await c.defineLimit('llm', { perSecond: 1, burst: 1000 });
    assert.equal(await c.take('per-user', { key: 'alice' }), null);
    await c.take('per-user', { key: 'alice' });
    await assert.rejects(c.take('per-user', { key: 'alice' }), (e) => e instanceof weir.Busy && e.retryAfterMs > 0);
    await c.take('per-user', { key: 'bob' }); // bob's bucket is his own
    const s = await c.session();
    await assert.rejects(
      s.acquire('gpu', { parts: [{ limit: 'llm', units: 5000 }] }),
      (e) => e instanceof weir.TooLarge && e.part?.limit === 'llm',
    );
    assert.equal((await c.showLimit('gpu')).in_use, 0, 'the refused request charged no part');
    assert.equal((await c.showLimit('llm')).tokens, 1000);
    const job = await s.acquire('gpu', { parts: [{ limit: 'llm', units: 800 }], estimate: true });
    assert.equal((await c.showLimit('llm')).tokens, 200);
    const settled = await job.settle(350);
    assert.equal(settled.status, 'settled');
    assert.equal((await c.showLimit('llm')).tokens >= 650, true);
    assert.equal((await job.settle(350)).duplicate, true);
    await job.release();
    assert.equal((await c.showLimit('gpu')).in_use, 0);
  } finally {
    await c.close();
  }
});

test('runs are admitted within the ceiling and settled once per epoch', { timeout: 60_000 }, async () => {
  const c = client('runs');
  try {
    await c.setTenant({ maxRunning: 1, budgetTokens: 1000 });
    await c.reserve('r1', { agent: 'a', period: 'p' });
    await c.reserve('r1', { agent: 'a', period: 'p' }); // idempotent
    await assert.rejects(c.reserve('r2', { period: 'p' }), (e) => e instanceof weir.TooManyRuns && e.running === 1);
    assert.deepEqual((await c.listRuns()).map((r) => r.run), ['r1']);
    assert.equal((await c.settle('r1', { epoch: 1, period: 'p', tokens: 40 })).duplicate, false);
    assert.equal((await c.settle('r1', { epoch: 1, period: 'p', tokens: 40 })).duplicate, true);
    await assert.rejects(c.settle('r1', { epoch: 1, period: 'p', tokens: 41 }), weir.Conflict);
    assert.equal((await c.spent('p')).tokens, 40);
    await c.releaseRun('r1');
    await c.reserve('r2', { period: 'p' });
    await c.releaseRun('r2');
  } finally {
    await c.close();
  }
});

test('withPermit releases when its work ends, and hands the work the loss signal', { timeout: 60_000 }, async () => {
  const c = client('with');
  try {
    await c.defineLimit('db', { concurrent: 1 });
    const seen = await c.withPermit('db', async (signal) => {
      assert.equal(signal.aborted, false);
      return (await c.showLimit('db')).in_use;
    });
    assert.equal(seen, 1);
    assert.equal((await c.showLimit('db')).in_use, 0);
    await assert.rejects(c.withPermit('db', async () => { throw new Error('work failed'); }), /work failed/);
    assert.equal((await c.showLimit('db')).in_use, 0);
  } finally {
    await c.close();
  }
});

test('the partition harness holder records acquires, beliefs and releases, and exits when stdin closes', { timeout: 60_000 }, async () => {
  const { spawn } = await import('node:child_process');
  const c = client('jepsen');
  try {
    await c.defineLimit('mutex', { concurrent: 1 });
    const epoch = weir.bootClockNs();
    const holder = spawn(process.execPath, [new URL('./jepsen_holder.mjs', import.meta.url).pathname,
      '--servers', cluster.servers.join(','), '--limit', 'mutex', '--cap', '1', '--process', '7',
      '--epoch-boot-ns', String(epoch), '--ttl-ms', '1000'], { stdio: ['pipe', 'pipe', 'ignore'] });
    let out = '';
    holder.stdout.on('data', (d) => { out += d; });
    await sleep(2500);
    holder.stdin.end();
    const code = await Promise.race([new Promise((r) => holder.on('exit', r)), sleep(15_000).then(() => 'hung')]);
    assert.equal(code, 0);
    const ops = out.trim().split('\n').map((l) => JSON.parse(l));
    assert.ok(ops.every((o) => o.process === 7 && ['acquire', 'hold', 'release'].includes(o.f)));
    const holds = ops.filter((o) => o.f === 'hold');
    assert.ok(holds.length > 0, 'a belief recorded');
    for (const h of holds) {
      assert.equal(h.value.client, 'typescript');
      assert.ok(h.value.from_ns <= h.value.to_ns && h.value.to_ns <= h.value.deadline_ns, JSON.stringify(h.value));
    }
    const released = ops.filter((o) => o.f === 'release' && o.kind === 'ok').length;
    assert.ok(released >= holds.length - 1);
  } finally {
    await c.close();
  }
});

test('a held ticket asked again is one holding of two permits: releasing either tells the other, a halt tells both', { timeout: 60_000 }, async () => {
  const c = client('reask');
  try {
    await c.defineLimit('db', { concurrent: 1 });
    const s = await c.session({ ttlMs: 3000 });
    const told = (p) => Promise.race([p.lost, sleep(5000).then(() => null)]);

    const first = await s.acquire('db', { ticket: 7001 });
    const again = await s.acquire('db', { ticket: 7001, wait: false });
    assert.equal(again.ticket, 7001);
    assert.equal(again.fence, first.fence, 'asked again: the same fence');
    assert.equal((await c.showLimit('db')).in_use, 1, 'charged once');
    await again.release();
    assert.deepEqual(await told(first), { kind: 'released' }, 'the first permit is told');
    assert.deepEqual(first.lostReason(), { kind: 'released' });
    assert.ok(first.signal.aborted);
    assert.equal(again.lostReason(), null, 'the released permit is not lost: it was released');
    assert.equal((await c.showLimit('db')).in_use, 0);
    await first.release();

    const one = await s.acquire('db', { ticket: 8001 });
    const two = await s.acquire('db', { ticket: 8001, wait: false });
    await c.setHalt('asked again');
    const halted = { kind: 'halted', scope: { agent: null }, reason: 'asked again' };
    assert.deepEqual(await told(one), halted, 'the first permit is told the halt');
    assert.deepEqual(await told(two), halted, 'the second permit is told the halt');
    await c.clearHalt();
    await two.release();
    assert.deepEqual(one.lostReason(), halted, 'a loss already told stays');
    assert.equal((await c.showLimit('db')).in_use, 0);
    await s.close();
  } finally {
    await c.close();
  }
});
