// The package as a user gets it: `npm pack`, installed with ioredis into an empty temp
// project, then the package README's example (the block marked `<!-- example: readme -->`)
// and the project's front page's (`../README.md`, the block marked `<!-- example: node -->`,
// its server URL pointed at the test server) run against a real server with the module, and
// the CommonJS entry and the types checked.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const repo = join(root, '..');
const fail = (message) => {
  console.error(`pack-check: ${message}`);
  process.exit(1);
};

const readme = readFileSync(join(root, 'README.md'), 'utf8');
const example = /<!-- example: readme -->\n```js\n([\s\S]*?)```/.exec(readme)?.[1];
if (!example) fail('README.md has no block marked <!-- example: readme -->');
// The front page's example names the server scripts/run-server starts.
const FRONT_PAGE_URL = 'redis://127.0.0.1:6379';
const frontPage = readFileSync(join(repo, 'README.md'), 'utf8');
const frontExample = /<!-- example: node -->\n```js\n([\s\S]*?)```/.exec(frontPage)?.[1];
if (!frontExample) fail('../README.md has no block marked <!-- example: node -->');
if (!frontExample.includes(`'${FRONT_PAGE_URL}'`)) fail(`the front page's Node example does not name ${FRONT_PAGE_URL}`);

const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8'));
const ioredis = lock.packages['node_modules/ioredis']?.version;
const nodeTypes = lock.packages['node_modules/@types/node']?.version;
if (!ioredis || !nodeTypes) fail('package-lock.json pins no ioredis or @types/node');

const work = mkdtempSync(join(tmpdir(), 'fencedlock-pack-'));
let server;
try {
  const packed = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: root, encoding: 'utf8' }));
  const tarball = join(work, packed[0].filename);
  const files = packed[0].files.map((f) => f.path);
  for (const needed of ['dist/esm/index.js', 'dist/esm/index.d.ts', 'dist/cjs/index.js', 'dist/cjs/index.d.ts', 'functions.lua', 'README.md']) {
    if (!files.includes(needed)) fail(`the tarball lacks ${needed}`);
  }
  if (files.some((f) => f.startsWith('dist/test') || f.startsWith('src/') || f.startsWith('test/'))) fail('the tarball carries tests or sources');
  const app = join(work, 'app');
  execFileSync('mkdir', ['-p', app]);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error', tarball, `ioredis@${ioredis}`, `@types/node@${nodeTypes}`], { cwd: app, stdio: 'inherit' });

  // A server with the module, on a port of the Node suites' range.
  const port = await freePort();
  server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loadmodule', join(repo, 'target/release/libfencedlock_module.so')], { stdio: 'ignore' });
  await waitForPort(port);

  writeFileSync(join(app, 'example.mjs'), example);
  const out = execFileSync(process.execPath, ['example.mjs'], { cwd: app, encoding: 'utf8', env: { ...process.env, REDIS_URL: `redis://127.0.0.1:${port}` }, timeout: 30_000 });
  if (!/invoice inv_72 sent with fence \d+/.test(out) || !/report built with fence \d+/.test(out)) fail(`the README example printed:\n${out}`);

  writeFileSync(join(app, 'front-page.mjs'), frontExample.replace(`'${FRONT_PAGE_URL}'`, `'redis://127.0.0.1:${port}'`));
  const front = execFileSync(process.execPath, ['front-page.mjs'], { cwd: app, encoding: 'utf8', timeout: 30_000 });
  if (!/^report built with fence \d+$/m.test(front)) fail(`the front page's example printed:\n${front}`);

  // CommonJS: require() it, and take a lease through Locker.open (its own ioredis connection).
  const cjsScript = "const { Locker } = require('fencedlock'); (async () => { const l = await Locker.open(process.env.REDIS_URL); const lease = await l.acquire('cjs'); if (typeof lease.fence !== 'bigint') process.exit(1); await lease.release(); await l.close(); console.log('cjs ok'); })();";
  const cjs = execFileSync(process.execPath, ['-e', cjsScript], { cwd: app, encoding: 'utf8', env: { ...process.env, REDIS_URL: `redis://127.0.0.1:${port}` }, timeout: 30_000 });
  if (!cjs.includes('cjs ok')) fail(`the CommonJS entry does not work: ${cjs}`);

  // The types, as a strict TypeScript user sees them (ESM and CommonJS resolution).
  writeFileSync(join(app, 'check.mts'), "import { Locker, type Lease } from 'fencedlock';\nimport { Redis } from 'ioredis';\nconst l = new Locker(new Redis({ lazyConnect: true }));\nconst lease: Lease | null = await l.acquire('k', { ttl: 1000 });\nconst fence: bigint | undefined = lease?.fence;\nvoid fence;\n");
  writeFileSync(join(app, 'check.cts'), "import { Locker } from 'fencedlock';\nexport const make = (c: object): Locker => new Locker(c);\n");
  writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({ compilerOptions: { strict: true, noEmit: true, module: 'NodeNext', moduleResolution: 'NodeNext', target: 'ES2022', skipLibCheck: false, types: ['node'] }, files: ['check.mts', 'check.cts'] }));
  execFileSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', app], { cwd: app, stdio: 'inherit' });
  console.log(`pack-check: ${packed[0].filename} (${files.length} files) installs into an empty project; the README's and the front page's examples, the CommonJS entry and the types work`);
} finally {
  server?.kill('SIGKILL');
  rmSync(work, { recursive: true, force: true });
}

async function freePort() {
  for (let port = 26900; port < 27000; port++) {
    const ok = await new Promise((resolve) => {
      const probe = createServer();
      probe.once('error', () => resolve(false));
      probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
    });
    if (ok) return port;
  }
  fail('no free port in 26900-26999');
}

async function waitForPort(port) {
  const { connect } = await import('node:net');
  for (let i = 0; i < 250; i++) {
    const up = await new Promise((resolve) => {
      const s = connect(port, '127.0.0.1', () => { s.destroy(); resolve(true); });
      s.once('error', () => resolve(false));
    });
    if (up) return;
    await sleep(20);
  }
  fail(`redis-server did not listen on ${port}`);
}
