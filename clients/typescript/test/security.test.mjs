// TLS with the cluster's CA, and bearer tokens with roles, against a secure cluster.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import * as weir from '../dist/index.js';
import { Cluster } from './support/cluster.mjs';

let cluster;
before(async () => {
  cluster = await Cluster.start({ tls: true, tokens: { 'admin-secret': 'admin', 'alpha-secret': 'tenant:alpha' } });
});
after(async () => { await cluster?.close(); });

test('a client with the CA and a tenant token holds permits in its own tenant', { timeout: 60_000 }, async () => {
  const admin = new weir.Client(cluster.options({ tenant: 'alpha' }));
  const alpha = new weir.Client(cluster.options({ tenant: 'alpha', token: 'alpha-secret' }));
  try {
    assert.ok(admin.servers.every((u) => u.startsWith('https://')));
    await admin.defineLimit('db', { concurrent: 1 });
    const s = await alpha.session();
    const p = await s.acquire('db');
    assert.ok(p.fence > 0);
    await p.release();
    await s.close();
  } finally {
    await alpha.close();
    await admin.close();
  }
});

test('no token is Unauthenticated, another tenant or an admin act is Forbidden', { timeout: 60_000 }, async () => {
  const anonymous = new weir.Client({ servers: cluster.servers, ca: cluster.ca, tenant: 'alpha' });
  const alpha = new weir.Client(cluster.options({ tenant: 'beta', token: 'alpha-secret' }));
  try {
    await assert.rejects(anonymous.session(), weir.Unauthenticated);
    await assert.rejects(alpha.session({ tenant: 'beta' }).then((s) => s.acquire('db')), weir.Forbidden);
    await assert.rejects(alpha.defineLimit('x', { concurrent: 1, tenant: 'alpha' }), weir.Forbidden);
  } finally {
    await anonymous.close();
    await alpha.close();
  }
});

test('a node whose certificate the client cannot verify is refused, not trusted', { timeout: 60_000 }, async () => {
  const noCa = new weir.Client({ servers: cluster.servers.map((s) => `https://${s}`), token: 'admin-secret', tenant: 'alpha' });
  try {
    await assert.rejects(noCa.showLimit('db'), (e) => e instanceof weir.ProtocolError && /TLS verification failed/.test(e.message));
  } finally {
    await noCa.close();
  }
});
