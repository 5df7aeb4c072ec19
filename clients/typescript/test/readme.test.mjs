// The README's examples (```ts readme-example blocks), type-checked with tsc --strict as a
// user's code importing "weir-client" (the package by its own name), then run in order
// against a real cluster; each must exit 0 and print what it promises.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';

import { Cluster } from './support/cluster.mjs';

const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const OUT = path.join(PACKAGE, 'build', 'readme');

/** What each example must print, in README order. */
const EXPECTED = [
  /holding fence \d+\n.*in use now: 0/s,
  /alice: retry in \d+ ms/,
  /under fence \d+[\s\S]*refused by llm/,
  /stopped at step \d+|lost: halted/,
];

function examples() {
  const text = readFileSync(path.join(PACKAGE, 'README.md'), 'utf8');
  return [...text.matchAll(/```ts readme-example\n([\s\S]*?)```/g)].map((m) => m[1]);
}

let cluster;
before(async () => { cluster = await Cluster.start(); });
after(async () => { await cluster?.close(); });

test('the README examples type-check and run', { timeout: 180_000 }, () => {
  const blocks = examples();
  assert.equal(blocks.length, EXPECTED.length, 'four examples');
  rmSync(OUT, { recursive: true, force: true });
  mkdirSync(OUT, { recursive: true });
  const files = blocks.map((code, i) => {
    const file = path.join(OUT, `example${i + 1}.ts`);
    writeFileSync(file, `${code}\nexport {};\n`);
    return file;
  });
  writeFileSync(path.join(OUT, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      target: 'ES2022', lib: ['ES2022', 'esnext.disposable'], module: 'NodeNext', moduleResolution: 'NodeNext',
      types: ['node'], strict: true, outDir: '.', rootDir: '.', skipLibCheck: false,
    },
    files: files.map((f) => path.basename(f)),
  }));
  const tsc = spawnSync(process.execPath, [path.join(PACKAGE, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', OUT], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(tsc.status, 0, `tsc: ${tsc.stdout}${tsc.stderr}`);
  files.forEach((file, i) => {
    const run = spawnSync(process.execPath, [file.replace(/\.ts$/, '.js')], {
      encoding: 'utf8', timeout: 60_000,
      env: { ...process.env, WEIR_HTTP_SERVERS: cluster.servers.join(','), WEIR_CA: '', WEIR_TOKEN: '' },
    });
    assert.equal(run.status, 0, `example ${i + 1}: ${run.stdout}${run.stderr}`);
    assert.match(run.stdout, EXPECTED[i], `example ${i + 1} printed ${run.stdout}`);
  });
});
