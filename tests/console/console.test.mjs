// The operator console in a real headless Chromium (Debian's, driven by playwright-core)
// against real three-node clusters of the debug binary. Phases, each logged:
//  1. without tokens: the console loads every view (screenshots of each at 1280x800 into
//     the directory WEIR_CONSOLE_SHOTS names, if set); the tenants view lists every tenant
//     and says there is no halt; a limit's empty tables say so; a grant made by the CLI
//     appears live on the limit's page, its holder "held since HH:MM:SS", its lease ending
//     "in N s", a waiter "waiting for N s"; a halt set from the page puts a banner on every
//     view (scope, reason, since when, a link to clear it) and a row in the cluster-wide
//     list, refuses the next CLI acquire in its scope, and a clear from the page lifts both;
//     the page fits a phone's width; under a load of takes the leader is killed, the page
//     shows the new leader (the time it took is printed; the requirement is 2 s, the wait
//     is bounded at 10 s) and the limit's chart on a surviving node has points of grants
//     and refusals from before and after the kill.
//  2. with tokens: the page asks for a token on 401; a `read` token sees the node table,
//     every halt (the banner) and every tenant, is offered no halt button, and a halt forged
//     with that token is refused 403.
//  3. with two Raft groups: the page offers a choice of group; group 1 lists its tenant and
//     not group 2's; chosen, group 2 lists its own, and a CLI grant in it appears live.
// Every wait is bounded; clusters, CLIs, the browser and temporary directories are cleaned
// up whatever happens.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { Cluster } from './cluster.mjs';

/** Where the screenshots of each view go (`docs` refreshes the README's); unset: none. */
const SHOTS = process.env.WEIR_CONSOLE_SHOTS;
/** Longest any single wait on the page lasts, ms. */
const WAIT_MS = 10_000;

const log = (m) => console.log(`[console] ${m}`);

async function browser() {
  const dir = mkdtempSync(path.join(tmpdir(), 'weir-chromium-'));
  const context = await chromium.launchPersistentContext(dir, {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1280, height: 800 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  context.setDefaultTimeout(WAIT_MS);
  return { context, close: async () => { await context.close(); rmSync(dir, { recursive: true, force: true }); } };
}

async function shot(page, name) {
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, `console-${name}.png`) });
}

/** Fails on any script error or CSP violation the page reports. */
function watchErrors(page) {
  const errors = [];
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error' && !/status of 40[13]/.test(m.text())) errors.push(`console: ${m.text()}`); });
  return errors;
}

async function withoutTokens(b) {
  const cluster = await Cluster.start();
  try {
    const leader = await cluster.leader();
    const viewer = [1, 2, 3].find((id) => id !== leader);
    log(`cluster up: leader ${leader}, the page is on node ${viewer}`);
    assert.equal((await cluster.http(leader, 'PUT', '/v1/tenants/default/limits/db', { concurrent: 2 })).status, 200);
    assert.equal((await cluster.http(leader, 'PUT', '/v1/tenants/default/limits/api', { per_second: 50 })).status, 200);
    assert.equal((await cluster.http(leader, 'PUT', '/v1/tenants/default/limits/model', { per_second: 10 })).status, 200);
    const keyed = await cluster.http(leader, 'PUT', '/v1/tenants/default/limits/per-user', { concurrent: 1, keyed: true });
    assert.equal(keyed.status, 200, JSON.stringify(keyed.json));
    assert.equal((await cluster.http(leader, 'PUT', '/v1/tenants/default/limits/trial', { concurrent: 5, shadow: true })).status, 200);

    const page = await b.context.newPage();
    const errors = watchErrors(page);
    const ui = await page.goto(`${cluster.url(viewer)}/ui#/cluster`);
    assert.match(ui.headers()['content-security-policy'], /default-src 'self'/);
    await page.locator('#nodes table').waitFor();
    await page.locator('#feed-state.live').waitFor();
    assert.match(await page.locator('#leader').textContent(), new RegExp(`node ${leader}\\b`));
    log('phase: the console loads (cluster view)');
    await shot(page, 'cluster');

    await page.goto(`${cluster.url(viewer)}/ui#/limits/default`);
    await page.getByRole('link', { name: 'db' }).waitFor();
    const perUser = page.locator('tr', { has: page.getByRole('link', { name: 'per-user' }) });
    assert.match(await perUser.textContent(), /keyed/);
    assert.match(await page.locator('tr', { has: page.getByRole('link', { name: 'trial' }) }).textContent(), /shadow/);
    await page.fill('#limits-prefix', 'd');
    await page.press('#limits-prefix', 'Enter');
    await page.getByRole('link', { name: 'api' }).waitFor({ state: 'detached' });
    assert.equal(await page.getByRole('link', { name: 'db' }).count(), 1, 'the filter keeps db');
    await page.fill('#limits-prefix', '');
    await page.press('#limits-prefix', 'Enter');
    await page.getByRole('link', { name: 'api' }).waitFor();
    await shot(page, 'limits');

    await page.goto(`${cluster.url(viewer)}/ui#/tenants`);
    await page.locator('#all-tenants a', { hasText: 'default' }).waitFor();
    assert.match(await page.locator('#all-halts tr.empty').textContent(), /^No halts/);
    assert.equal(await page.locator('#halt-banner').isHidden(), true, 'no banner without a halt');
    log('phase: the tenants view lists every tenant and says no halt is set');

    await page.goto(`${cluster.url(viewer)}/ui#/limit/default/db`);
    await page.locator('#holders table').waitFor();
    await page.locator('#feed-state.live').waitFor();
    assert.equal(await page.locator('#holders tr.empty').textContent(), 'No permits held.');
    assert.equal(await page.locator('#waiters tr.empty').textContent(), 'No tickets waiting.');
    assert.equal(await page.locator('#recent-empty').isVisible(), true, 'the live list says it is empty');
    log('phase: empty tables say so');
    const started = Date.now();
    cluster.cliBackground(['--tenant', 'default', 'acquire', 'db', '--hold', '60', '--agent', 'etl']);
    await page.locator('#recent li.ok', { hasText: 'granted' }).waitFor();
    await page.locator('#holders td', { hasText: 'etl' }).waitFor();
    log(`phase: a CLI grant appears live on the limit's page (${Date.now() - started} ms after the CLI started)`);
    // A waiter of weight 3 under fairness key "batch": db holds 1 of 2, and 2 units wait.
    const opened = await cluster.http(leader, 'POST', '/v1/sessions', { ttl_ms: 60_000 });
    assert.equal(opened.status, 200, JSON.stringify(opened.json));
    const waiting = { session: opened.json.session, ticket: 1, units: 2, fairness_key: 'batch', weight: 3, timeout_ms: 0 };
    const queued = await cluster.http(leader, 'POST', '/v1/tenants/default/limits/db/acquire', waiting);
    assert.equal(queued.status, 202, JSON.stringify(queued.json));
    const waiterRow = page.locator('#waiters tr', { hasText: 'batch' });
    await waiterRow.waitFor();
    const weightCell = await waiterRow.locator('td').nth(3).textContent();
    assert.equal(weightCell, '3', `the waiter's weight is shown: ${await waiterRow.textContent()}`);
    const waitingFor = await waiterRow.locator('td').nth(4).textContent();
    assert.match(waitingFor, /^\d+(\.\d)? (ms|s)$/, `waiting for: ${await waiterRow.textContent()}`);
    // The log clock read: held since a time of day, for "N ms" / "N.N s", lease ends "in N s".
    const holderRow = page.locator('#holders tr', { hasText: 'etl' });
    const heldSince = await holderRow.locator('td').nth(4).textContent();
    assert.match(heldSince, /^\d\d:\d\d:\d\d$/, `held since: ${await holderRow.textContent()}`);
    const heldFor = await holderRow.locator('td').nth(5).textContent();
    assert.match(heldFor, /^\d+(\.\d)? (ms|s)$/, `held for: ${await holderRow.textContent()}`);
    const leaseEnds = await holderRow.locator('td').nth(8).textContent();
    assert.match(leaseEnds, /^in \d+(\.\d)? (ms|s)$/, `lease ends: ${await holderRow.textContent()}`);
    assert.equal(await page.locator('#recent-empty').isVisible(), false, 'the live list has a grant');
    const holders = await cluster.http(leader, 'GET', '/v1/tenants/default/limits/db/holders');
    const etl = holders.json.items.find((x) => x.agent === 'etl');
    assert.ok(etl.granted_at_ms > 0 && holders.json.now_ms >= etl.granted_at_ms, JSON.stringify(holders.json));
    log(`phase: the limit's page shows the holder held since ${heldSince} for ${heldFor}, its lease ending ${leaseEnds}, the waiter's weight 3 waiting for ${waitingFor}`);
    await shot(page, 'limit');
    const withdrawn = await cluster.http(leader, 'POST', `/v1/sessions/${opened.json.session}/release`, { ticket: 1 });
    assert.equal(withdrawn.status, 200, JSON.stringify(withdrawn.json));
    await waiterRow.waitFor({ state: 'detached' });

    const tenant = await cluster.http(leader, 'PUT', '/v1/tenants/default', { max_running: 4, budget_tokens: 1000 });
    assert.equal(tenant.status, 200, JSON.stringify(tenant.json));
    const run = await cluster.http(leader, 'POST', '/v1/tenants/default/runs/nightly/reserve',
      { agent: 'etl', period: '2026-12', hold_tokens: 300 });
    assert.equal(run.status, 200, JSON.stringify(run.json));
    await page.goto(`${cluster.url(viewer)}/ui#/tenants/default/2026-12`);
    await page.locator('#halt-form').waitFor();
    await page.locator('#tenant-body td', { hasText: 'nightly' }).waitFor();
    await page.fill('#halt-agent', 'etl');
    await page.fill('#halt-reason', 'runaway loop');
    await page.click('#halt-button');
    await page.click('#confirm-yes');
    await page.locator('#tenant-body td', { hasText: 'runaway loop' }).waitFor();
    const refused = cluster.cli(['--tenant', 'default', 'acquire', 'db', '--agent', 'etl', '--no-wait', '--', 'true']);
    assert.equal(refused.code, 3, `a halted agent's acquire exits 3: ${refused.out}${refused.err}`);
    assert.match(refused.out + refused.err, /halt/i);
    const other = cluster.cli(['--tenant', 'default', 'acquire', 'api', '--agent', 'web', '--no-wait', '--', 'true']);
    assert.equal(other.code, 0, `another agent is outside the halt: ${other.out}${other.err}`);
    log('phase: a halt set from the page refuses the next CLI acquire in its scope');
    await shot(page, 'tenants');
    // The banner: on every view, naming scope, reason and since when, linking to the clear.
    const banner = page.locator('#halt-banner');
    await banner.locator('li', { hasText: 'runaway loop' }).waitFor();
    const said = await banner.textContent();
    assert.match(said, /agent etl of tenant default: “runaway loop” · since \d\d:\d\d:\d\d \(\d+(\.\d)? (ms|s) ago\)/, said);
    assert.equal(await banner.getByRole('link', { name: 'clear it' }).getAttribute('href'), '#/tenants/default');
    for (const view of ['cluster', 'limits/default', 'limit/default/db']) {
      await page.goto(`${cluster.url(viewer)}/ui#/${view}`);
      await banner.locator('li', { hasText: 'runaway loop' }).waitFor();
    }
    await page.locator('#holders table').waitFor();
    await shot(page, 'banner');
    await page.goto(`${cluster.url(viewer)}/ui#/tenants`);
    const listed = page.locator('#all-halts tr', { hasText: 'runaway loop' });
    await listed.waitFor();
    assert.match(await listed.textContent(), /^defaultagent etlrunaway loop\d\d:\d\d:\d\d \(.* ago\)Clear$/);
    assert.match(await page.locator('#all-tenants tr', { hasText: 'default' }).textContent(), /^default1/);
    await shot(page, 'halts');
    log('phase: the halt is on a banner over every view and in the cluster-wide list, with since when');
    await banner.getByRole('link', { name: 'clear it' }).click();
    await page.locator('#tenant-body td', { hasText: 'runaway loop' }).waitFor();
    await page.click('button.clear-halt');
    await page.click('#confirm-yes');
    await page.locator('#tenant-body td', { hasText: 'runaway loop' }).waitFor({ state: 'detached' });
    await banner.waitFor({ state: 'hidden' });
    const lifted = cluster.cli(['--tenant', 'default', 'acquire', 'db', '--agent', 'etl', '--no-wait', '--', 'true']);
    assert.equal(lifted.code, 0, `after the clear the acquire is granted: ${lifted.out}${lifted.err}`);
    log('phase: a clear from the page lifts it, and the banner goes');

    await page.setViewportSize({ width: 390, height: 800 });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(overflow <= 390, `the tenants view fits a phone's width: ${overflow}px`);
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.goto(`${cluster.url(viewer)}/ui#/cluster`);
    await page.reload();
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Skip to content');
    await page.keyboard.press('Tab');
    await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => location.hash === '#/limits');
    await page.goto(`${cluster.url(viewer)}/ui#/cluster`);
    log('phase: phone width and keyboard');

    await page.locator(`#leader[data-leader="${leader}"]`).waitFor();
    // A load of takes on `model` (10 a second) through the viewer: grants, and refusals
    // beyond the rate, before, across and after the kill.
    const load = takes(cluster.url(viewer), 'default', 'model', 6_000);
    await sleep(2_000);
    const killed = Date.now();
    await cluster.kill(leader);
    await page.waitForFunction((old) => {
      const l = document.getElementById('leader')?.dataset.leader;
      return l && l !== String(old);
    }, leader, { timeout: WAIT_MS });
    const shown = Number(await page.locator('#leader').getAttribute('data-leader'));
    log(`phase: leader ${leader} killed; the page shows leader ${shown} after ${Date.now() - killed} ms (requirement: 2000 ms)`);
    assert.notEqual(shown, leader);
    // The node's own record: after a reload this page has seen only the new leader, and the
    // history still names the killed one.
    await page.reload();
    await page.waitForFunction((old) => {
      const t = document.getElementById('leader-history')?.textContent ?? '';
      return t.includes('recorded since it started') && t.includes(`node ${old}`);
    }, leader, { timeout: WAIT_MS });
    const elections = await page.locator('#elections').textContent();
    assert.match(elections, /^Elections in the last hour: ([2-9]|\d{2,}) \(as node \d+ recorded since it started\)$/);
    log(`phase: after a reload the leader history is the node's record: ${elections}`);
    const done = await load;
    assert.ok(done.granted > 0 && done.refused > 0, `the load was granted and refused: ${JSON.stringify(done)}`);
    await page.goto(`${cluster.url(viewer)}/ui#/limit/default/model`);
    const grants = page.locator('#limit-history-rate polyline.s1');
    await grants.waitFor();
    // Points above the baseline: grants in the samples; refusals too.
    const above = (locator) => locator.evaluate((el) => {
      const ys = el.getAttribute('points').trim().split(' ').map((p) => Number(p.split(',')[1]));
      return { n: ys.length, up: ys.filter((y) => y < Math.max(...ys)).length };
    });
    const g = await above(grants);
    const r = await above(page.locator('#limit-history-rate polyline.s3'));
    assert.ok(g.n >= 5 && g.up >= 2, `the chart has grant points: ${JSON.stringify(g)}`);
    assert.ok(r.up >= 1, `the chart has refusal points: ${JSON.stringify(r)}`);
    await shot(page, 'chart');
    log(`phase: the limit's chart on node ${viewer} has ${g.n} samples, ${g.up} with grants, across the leader kill (${JSON.stringify(done)})`);
    assert.deepEqual(errors, []);
    await page.close();
  } catch (e) {
    console.error(cluster.logTails());
    throw e;
  } finally {
    await cluster.close();
  }
}

async function withTokens(b) {
  const tokens = { 'admin-secret': 'admin', 'read-secret': 'read', 'acme-secret': 'tenant:acme' };
  const cluster = await Cluster.start(tokens);
  try {
    const leader = await cluster.leader();
    const page = await b.context.newPage();
    await page.goto(`${cluster.url(leader)}/ui#/tenants/acme`);
    await page.locator('#token-dialog[open]').waitFor();
    await page.fill('#token-input', 'read-secret');
    await page.press('#token-input', 'Enter');
    await page.locator('#who', { hasText: 'role read' }).waitFor();
    await page.locator('#halt-read-only').waitFor();
    assert.equal(await page.locator('#halt-button').count(), 0, 'a read token is offered no halt button');
    assert.equal(await page.locator('button.clear-halt').count(), 0);
    const forged = await page.evaluate(async () => {
      const r = await fetch('/v1/tenants/acme/halt', {
        method: 'PUT',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${sessionStorage.getItem('weir.token')}` },
        body: JSON.stringify({ reason: 'forged' }),
      });
      return { status: r.status, body: await r.json() };
    });
    assert.equal(forged.status, 403, JSON.stringify(forged));
    assert.equal(forged.body.error, 'Forbidden');
    const halts = await cluster.http(leader, 'GET', '/v1/tenants/acme/halts');
    assert.equal(JSON.stringify(halts.json).includes('forged'), false, 'the forged halt was not set');
    log('phase: a read token sees no halt button; a forged halt is refused 403');
    const set = await cluster.http(leader, 'PUT', '/v1/tenants/acme/halt', { reason: 'quota review' });
    assert.equal(set.status, 200, JSON.stringify(set.json));
    await page.goto(`${cluster.url(leader)}/ui#/cluster`);
    await page.locator('#nodes table').waitFor();
    assert.equal(await page.locator('#nodes tbody tr').count(), 3, 'the read role sees every node');
    await page.locator('#halt-banner li', { hasText: 'quota review' }).waitFor();
    assert.equal(await page.locator('#halt-banner').getByRole('link', { name: 'see it' }).count(), 1);
    await page.goto(`${cluster.url(leader)}/ui#/tenants`);
    await page.locator('#all-halts td', { hasText: 'quota review' }).waitFor();
    await page.locator('#all-tenants a', { hasText: 'acme' }).waitFor();
    assert.equal(await page.locator('#all-halts button.clear-halt').count(), 0, 'no clear button for read');
    log('phase: a read token sees the node table, the halt banner and every halt and tenant');
    await page.close();
  } finally {
    await cluster.close();
  }
}

async function withGroups(b) {
  const cluster = await Cluster.start({}, ['groups = 2']);
  try {
    const leader = await cluster.leader();
    const placed = cluster.cli(['tenant', 'place', '2', '--tenant', 'b']);
    assert.equal(placed.code, 0, placed.err);
    assert.equal((await cluster.http(leader, 'PUT', '/v1/tenants/a/limits/one', { concurrent: 1 })).status, 200);
    assert.equal((await cluster.http(leader, 'PUT', '/v1/tenants/b/limits/two', { concurrent: 1 })).status, 200);
    const page = await b.context.newPage();
    const errors = watchErrors(page);
    await page.goto(`${cluster.url(leader)}/ui#/tenants`);
    await page.locator('#group-choice').waitFor();
    assert.deepEqual(await page.locator('#group-select option').allTextContents(), ['1', '2']);
    assert.equal(await page.locator('#group-select').inputValue(), '1');
    await page.locator('#all-tenants a', { hasText: 'a' }).waitFor();
    assert.equal(await page.locator('#all-tenants a', { hasText: 'b' }).count(), 0, 'group 1 does not hold b');
    log('phase: two groups: the page offers both, and group 1 lists its own tenant');
    await page.selectOption('#group-select', '2');
    await page.locator('#all-tenants a', { hasText: 'b' }).waitFor();
    assert.equal(await page.locator('#group-select').inputValue(), '2');
    assert.equal(await page.locator('#all-tenants a', { hasText: /^a$/ }).count(), 0, 'group 2 does not hold a');
    await page.goto(`${cluster.url(leader)}/ui#/limit/b/two`);
    await page.locator('#feed-state.live').waitFor();
    cluster.cliBackground(['--group', '2', '--tenant', 'b', 'acquire', 'two', '--hold', '30', '--agent', 'in-two']);
    await page.locator('#recent li.ok', { hasText: 'granted' }).waitFor();
    await page.locator('#holders td', { hasText: 'in-two' }).waitFor();
    log("phase: group 2 chosen: its tenants, and a grant in it live on its limit's page");
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    await cluster.close();
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Takes one token at a time from `tenant`/`limit` through `base` for `ms`: the counts of
 * grants, refusals and failures (a node down, no leader yet). Bounded in time. */
async function takes(base, tenant, limit, ms) {
  const counts = { granted: 0, refused: 0, failed: 0 };
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try {
      const r = await fetch(`${base}/v1/tenants/${tenant}/limits/${limit}/take`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}', signal: AbortSignal.timeout(3_000),
      });
      await r.arrayBuffer();
      if (r.status === 200) counts.granted++;
      else if (r.status === 429) counts.refused++;
      else counts.failed++;
    } catch { counts.failed++; await sleep(50); }
  }
  return counts;
}

const b = await browser();
try {
  await withoutTokens(b);
  await withTokens(b);
  await withGroups(b);
  log('all phases passed');
} finally {
  await b.close();
}
