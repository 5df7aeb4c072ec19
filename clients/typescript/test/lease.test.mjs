// Token leases against one real three-node cluster shared by the tests of this file (each
// test in its own tenant; the last one freezes every node).

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import * as weir from '../dist/index.js';
import { Cluster, sleep } from './support/cluster.mjs';

let cluster;
before(async () => { cluster = await Cluster.start(); });
after(async () => { await cluster?.close(); });

/** A client of `tenant` with limit `api` defined as `spec`, and a session of `ttlMs`. */
async function setup(tenant, spec, ttlMs = 2000) {
  const c = new weir.Client(cluster.options({ tenant }));
  await c.defineLimit('api', spec);
  const s = await c.session({ ttlMs });
  return { c, s };
}

test('local takes stay within the cap plus the rate over a window, refilled and renewed', { timeout: 60_000 }, async () => {
  const { c, s } = await setup('lease-local', { perSecond: 100, burst: 100 });
  try {
    const lease = await s.lease('api', { ratePerS: 20, cap: 10 });
    assert.deepEqual([lease.figures.rateMicroPerS, lease.figures.cap], [20_000_000, 10]);
    await sleep(300);
    // Over a window that starts with the bucket full: at most cap + rate x window.
    const start = weir.bootNowMs();
    let ok = 0;
    for (let i = 0; i < 5000 && weir.bootNowMs() - start < 1000; i++) {
      if (lease.tryTake(1)) ok += 1;
      await sleep(1);
    }
    const window = (weir.bootNowMs() - start) / 1000;
    assert.ok(ok <= 10 + 20 * window, `${ok} local takes in ${window.toFixed(3)} s, above cap 10 + 20/s x window`);
    assert.ok(ok >= 20, `only ${ok} local takes in ${window.toFixed(3)} s: the lease was not refilled`);
    const f = lease.figures;
    assert.equal(f.local, ok);
    assert.ok(f.requests >= 3, `${f.requests} requests over a second of 400 ms renewals`);
    // Idle, the lease is renewed down to an eighth of its rate.
    for (let i = 0; i < 150 && lease.figures.rateMicroPerS !== 20_000_000 / 8; i++) await sleep(20);
    assert.equal(lease.figures.rateMicroPerS, 20_000_000 / 8);
    await lease.end();
  } finally {
    await c.close();
  }
});

test('end gives the bucket\'s tokens back to the cluster, and the lease spends no more', { timeout: 60_000 }, async () => {
  const { c, s } = await setup('lease-end', { perSecond: 1, burst: 40 });
  try {
    const lease = await s.lease('api', { ratePerS: 0.5, cap: 20 });
    const before = await c.showLimit('api');
    assert.ok(before.tokens <= 21, `the cluster holds ${before.tokens} tokens with 20 leased out of 40`);
    assert.ok(lease.tryTake(2), 'a full lease covers 2 tokens');
    await lease.end();
    assert.equal(lease.tryTake(1), false);
    assert.ok(lease.error instanceof weir.LeaseEnded, `${lease.error}`);
    let tokens = 0;
    for (let i = 0; i < 40 && tokens < 38; i++) {
      tokens = (await c.showLimit('api')).tokens;
      if (tokens < 38) await sleep(50);
    }
    assert.ok(tokens >= 38 && tokens <= 40, `after the end the cluster holds ${tokens} tokens, want the 18 left returned`);
  } finally {
    await c.close();
  }
});

test('nothing is spent once the session is closed', { timeout: 60_000 }, async () => {
  const { c, s } = await setup('lease-close', { perSecond: 100, burst: 100 });
  try {
    const lease = await s.lease('api', { ratePerS: 50, cap: 20 });
    assert.ok(lease.tryTake(1));
    await s.close();
    assert.equal(lease.tryTake(1), false, 'a token spent after the session closed');
    await assert.rejects(lease.take(1), (e) => e instanceof weir.SessionLost);
  } finally {
    await c.close();
  }
});

test('a renewal refused by a halt stops the lease, and a take answers the halt', { timeout: 60_000 }, async () => {
  const { c, s } = await setup('lease-halt', { perSecond: 100, burst: 100 });
  try {
    const lease = await s.lease('api', { ratePerS: 50, cap: 20 });
    await c.setHalt('stop');
    for (let i = 0; i < 100 && lease.error === null; i++) {
      lease.tryTake(1);
      await sleep(20);
    }
    assert.ok(lease.error instanceof weir.Halted, `the lease after a halt: ${lease.error}`);
    assert.equal(lease.tryTake(1), false);
    await assert.rejects(lease.take(1), (e) => e instanceof weir.Halted);
    await assert.rejects(s.lease('api', { ratePerS: 1, cap: 1 }), (e) => e instanceof weir.Halted);
  } finally {
    await c.close();
  }
});

test('with every node frozen the lease spends until the belief deadline and nothing after', { timeout: 60_000 }, async () => {
  const ttlMs = 2000;
  const { c, s } = await setup('lease-deadline', { perSecond: 1000, burst: 1000 }, ttlMs);
  try {
    const lease = await s.lease('api', { ratePerS: 200, cap: 100 });
    await sleep(300);
    const frozen = weir.bootNowMs();
    for (const n of cluster.nodes) cluster.pause(n.id);
    let okAfter = 0;
    let lastOk = -1;
    for (let i = 0; i < 2000 && weir.bootNowMs() - frozen < 2600; i++) {
      if (lease.tryTake(1)) {
        okAfter += 1;
        lastOk = weir.bootNowMs() - frozen;
      }
      await sleep(2);
    }
    assert.ok(okAfter > 0, 'no local take while the nodes were frozen, before the deadline');
    assert.ok(lastOk < ttlMs, `a local take ${lastOk.toFixed(0)} ms after the freeze, past the TTL`);
    assert.ok(s.deadlineLeftMs() < 0, `the deadline is ${s.deadlineLeftMs()} ms ahead with every node frozen`);
  } finally {
    for (const n of cluster.nodes) cluster.resume(n.id);
    await c.close();
  }
});
