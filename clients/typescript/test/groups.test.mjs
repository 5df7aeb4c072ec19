// A cluster of two data groups: a client of group 2 (`group`, the Weir-Group header on every
// request) holds the permits of a tenant placed there; a client of the default group is
// refused WrongGroup naming group 2.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import * as weir from '../dist/index.js';
import { Cluster } from './support/cluster.mjs';

test('a client of a group holds the permits of the tenants placed in it', { timeout: 120_000 }, async () => {
  const cluster = await Cluster.start({ extra: ['groups = 2'] });
  const clients = [];
  try {
    const admin = new weir.Client(cluster.options({ tenant: 'b' }));
    clients.push(admin);
    assert.equal(await admin.placeTenant(2), 2);
    assert.equal(await admin.placeTenant(), 2);
    await assert.rejects(admin.placeTenant(1), (e) => e instanceof weir.WrongGroup && e.group === 2);

    const two = new weir.Client(cluster.options({ tenant: 'b', group: 2 }));
    clients.push(two);
    await two.defineLimit('db', { concurrent: 1 });
    const s = await two.session({ ttlMs: 3000 });
    const p = await s.acquire('db');
    assert.ok(p.fence > 0);
    assert.equal((await two.showLimit('db')).in_use, 1);
    await s.close();

    const plain = new weir.Client(cluster.options({ tenant: 'b' }));
    clients.push(plain);
    const other = await plain.session({ ttlMs: 3000 });
    await assert.rejects(other.acquire('db'), (e) => {
      assert.ok(e instanceof weir.WrongGroup, String(e));
      assert.equal(e.group, 2);
      assert.equal(e.tenant, 'b');
      assert.equal(e.status, 421);
      assert.match(e.message, /open one with the header `Weir-Group: 2`/);
      return true;
    });
    await other.close();

    assert.throws(() => new weir.Client(cluster.options({ group: -1 })), /got -1/);
  } finally {
    for (const c of clients) await c.close();
    await cluster.close();
  }
});
