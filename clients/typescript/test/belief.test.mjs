// The belief rule (G2) and incidents (G9), each on a cluster of its own since they stop
// nodes: a holder whose keep-alives stop being answered is told of the loss no later than
// its belief deadline; a holder whose leader stops keeps its permit.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import * as weir from '../dist/index.js';
import { Cluster, sleep } from './support/cluster.mjs';

test('the clock counts suspend where the platform shows it, and the margin is a tenth of the TTL', () => {
  assert.equal(weir.CLOCK_NAME, 'CLOCK_BOOTTIME (/proc/uptime)');
  const a = weir.bootNowMs();
  assert.ok(weir.bootNowMs() >= a);
  assert.equal(weir.marginForMs(3000), 300);
  assert.equal(weir.marginForMs(500), 100);
  assert.equal(weir.deadlineAfterMs(1000, 3000), 3700);
});

test('without a suspend the boot clock keeps the pace of the monotonic clock, and reads CLOCK_BOOTTIME', async () => {
  const boot0 = weir.bootNowMs();
  const mono0 = performance.now();
  for (let i = 0; i < 300; i++) {
    for (let j = 0; j < 100; j++) weir.bootNowMs();
    await new Promise((r) => setImmediate(r));
  }
  await sleep(50);
  const drift = weir.bootNowMs() - boot0 - (performance.now() - mono0);
  assert.ok(Math.abs(drift) < 1, `the boot clock drifted ${drift.toFixed(3)} ms from the monotonic clock`);
  const uptimeMs = Number(readFileSync('/proc/uptime', 'ascii').split(' ')[0]) * 1000;
  const bootMs = weir.bootClockNs() / 1e6;
  assert.ok(bootMs >= uptimeMs - 1 && bootMs < uptimeMs + 20, `CLOCK_BOOTTIME ${bootMs} ms against /proc/uptime ${uptimeMs} ms`);
});

test('a permit is lost no later than its belief deadline once keep-alives go unanswered', { timeout: 90_000 }, async () => {
  const cluster = await Cluster.start();
  const c = new weir.Client(cluster.options({ tenant: 'belief' }));
  const ttlMs = 2000;
  try {
    await c.defineLimit('db', { concurrent: 1 });
    const s = await c.session({ ttlMs });
    const p = await s.acquire('db');
    // Right after a keep-alive is acknowledged, freeze every node: that keep-alive was sent
    // before `acked`, so the belief must end by acked + TTL - margin.
    const seen = s.keepalivesAcknowledged;
    for (let i = 0; i < 200 && s.keepalivesAcknowledged === seen; i++) await sleep(5);
    const acked = weir.bootNowMs();
    assert.ok(s.keepalivesAcknowledged > seen, 'a keep-alive was acknowledged');
    for (const n of cluster.nodes) cluster.pause(n.id);
    const bound = acked + ttlMs - weir.marginForMs(ttlMs);
    assert.equal(p.lostReason(), null, 'believed held just after an acknowledged keep-alive');
    const lost = await Promise.race([p.lost, sleep(2 * ttlMs).then(() => null)]);
    const told = weir.bootNowMs();
    assert.deepEqual(lost, { kind: 'deadline' });
    assert.ok(p.signal.aborted);
    // Timers fire late on a loaded machine: 100 ms allowed, half the margin (200 ms), so a
    // deadline without its margin is still caught.
    assert.ok(told <= bound + 100, `told ${(told - bound).toFixed(0)} ms after the deadline bound`);
    assert.ok(s.deadlineMs <= bound, `deadline ${(s.deadlineMs - bound).toFixed(0)} ms past acked + TTL - margin`);
    assert.deepEqual(p.lostReason(), { kind: 'deadline' });
    for (const n of cluster.nodes) cluster.resume(n.id);
  } finally {
    for (const n of cluster.nodes) cluster.resume(n.id);
    await c.close();
    await cluster.close();
  }
});

test('a holder keeps its permit when its leader stops (SIGSTOP): keep-alives move to the new leader', { timeout: 120_000 }, async () => {
  const cluster = await Cluster.start();
  const c = new weir.Client(cluster.options({ tenant: 'incident' }));
  try {
    await c.defineLimit('db', { concurrent: 1 });
    const s = await c.session({ ttlMs: 3000 });
    const p = await s.acquire('db');
    const leader = await cluster.leader();
    cluster.pause(leader);
    const before = s.keepalivesAcknowledged;
    // Long enough for an election and the TTL to run out twice over without keep-alives.
    for (let i = 0; i < 70; i++) {
      assert.equal(p.lostReason(), null, `lost ${i * 100} ms after the leader stopped`);
      await sleep(100);
    }
    assert.ok(s.keepalivesAcknowledged > before + 3, 'keep-alives were acknowledged by the new leader');
    assert.ok(await c.fenceHeld('db', p.fence), 'the new leader holds the permit');
    cluster.resume(leader);
    await p.release();
    assert.equal((await c.showLimit('db')).in_use, 0);
  } finally {
    await c.close();
    await cluster.close();
  }
});
