// The package as a user gets it, from a clean copy of this folder as a checkout has it (its
// sources as committed: no dist/, no functions.lua, no generated src/library.ts or
// src/contract.ts), with ../protocol beside it (its committed files: contract.json and
// src/functions.lua, which the build takes), three ways:
// - `npm pack` (as `npm publish` would pack it; npm's `prepare` builds it), installed with
//   ioredis into an empty temp project, then the package README's example (the block marked
//   `<!-- example: readme -->`) and the project's front page's (`../README.md`, the block
//   marked `<!-- example: node -->`, its server URL pointed at the test server) run against a
//   real server with the module, and the CommonJS entry and the types checked; the tarball
//   carries functions.lua, byte for byte protocol/src/functions.lua;
// - `npm install <folder>` of another clean copy's node/;
// - `git clone` of a git repository made of a third clean copy (committed with the
//   repository's .gitignore: what git keeps of it), then `npm install <clone>/node`, the way the
//   README installs from git. (npm 11 cannot install a subfolder from a git URL itself: it
//   drops `#path:node` when it pins the commit, and reads the repository's root.)
// Packing leaves nothing in the copy but the build's own ignored output (dist/, functions.lua,
// src/library.ts, src/contract.ts).
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const repo = join(root, '..');
const fail = (message) => {
  console.error(`pack-check: ${message}`);
  process.exit(1);
};

/** Every file under `dir`, relative to it, node_modules left out. */
function filesUnder(dir) {
  const out = [];
  const walk = (d) => {
    for (const name of readdirSync(d)) {
      if (name === 'node_modules') continue;
      const path = join(d, name);
      if (statSync(path).isDirectory()) walk(path);
      else out.push(relative(dir, path));
    }
  };
  walk(dir);
  return out.sort();
}

/** What the build writes into this folder, all ignored by git. */
const GENERATED = ['dist', 'functions.lua', join('src', 'library.ts'), join('src', 'contract.ts')];

/** The committed files of protocol/, as a checkout has them (git ls-files). */
const protocolFiles = execFileSync('git', ['ls-files', '-z', 'protocol'], { cwd: repo, encoding: 'utf8' }).split('\0').filter(Boolean);
for (const needed of ['protocol/contract.json', 'protocol/src/functions.lua']) {
  if (!protocolFiles.includes(needed)) fail(`git does not track ${needed}`);
}

/** A checkout's layout in `into`: node/, a copy of this folder as committed (no build output,
 *  no installed modules: they are linked, as `npm ci` would have put them there, the build
 *  needs TypeScript), and protocol/'s committed files beside it. Returns the node/ copy. */
function cleanCopy(into) {
  const node = join(into, 'node');
  cpSync(root, node, {
    recursive: true,
    filter: (src) => {
      const rel = relative(root, src);
      return !(rel === 'node_modules' || GENERATED.includes(rel) || rel.endsWith('.tgz'));
    },
  });
  if (GENERATED.some((f) => existsSync(join(node, f)))) fail('the clean copy has build output');
  for (const file of protocolFiles) cpSync(join(repo, file), join(into, file));
  symlinkSync(join(root, 'node_modules'), join(node, 'node_modules'));
  return node;
}

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
  const source = cleanCopy(join(work, 'source'));
  const before = filesUnder(source);
  const packed = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: source, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
  const tarball = join(work, packed[0].filename);
  const files = packed[0].files.map((f) => f.path);
  for (const needed of ['dist/esm/index.js', 'dist/esm/index.d.ts', 'dist/cjs/index.js', 'dist/cjs/index.d.ts', 'functions.lua', 'README.md']) {
    if (!files.includes(needed)) fail(`the tarball of a clean copy lacks ${needed}`);
  }
  if (files.some((f) => f.startsWith('dist/test') || f.startsWith('src/') || f.startsWith('test/'))) fail('the tarball carries tests or sources');
  const litter = filesUnder(source).filter((f) => !before.includes(f) && !GENERATED.some((g) => f === g || f.startsWith(`${g}/`)));
  if (litter.length > 0) fail(`packing left files in the source tree: ${litter.join(', ')}`);
  execFileSync('tar', ['-xzf', tarball, '-C', work, 'package/functions.lua']);
  if (!readFileSync(join(work, 'package/functions.lua')).equals(readFileSync(join(repo, 'protocol/src/functions.lua')))) {
    fail("the tarball's functions.lua is not protocol/src/functions.lua");
  }
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

  // npm install <folder>, and npm install <git URL>, each of a clean copy.
  const probe = "import { Locker } from 'fencedlock'; const l = await Locker.open(process.env.REDIS_URL); const lease = await l.acquire('probe'); if (typeof lease?.fence !== 'bigint') process.exit(1); await lease.release(); await l.close(); console.log('probe ok');";
  // Both without node_modules, as a fresh clone has them: the build installs its own tools.
  const folder = cleanCopy(join(work, 'folder'));
  rmSync(join(folder, 'node_modules'));
  const gitCopy = join(work, 'git');
  rmSync(join(cleanCopy(gitCopy), 'node_modules'));
  cpSync(join(repo, '.gitignore'), join(gitCopy, '.gitignore'));
  const git = (cwd, ...args) => execFileSync('git', ['-c', 'user.name=pack-check', '-c', 'user.email=pack-check@localhost', ...args], { cwd, stdio: 'ignore' });
  git(gitCopy, 'init', '-q');
  git(gitCopy, 'add', '-A');
  git(gitCopy, 'commit', '-q', '-m', 'clean copy');
  git(work, 'clone', '-q', `file://${gitCopy}`, 'clone');
  for (const [how, spec] of [['a folder', folder], ['a git clone', join(work, 'clone', 'node')]]) {
    const dir = join(work, `app-${how.replace(/\W+/g, '-')}`);
    execFileSync('mkdir', ['-p', dir]);
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', spec, `ioredis@${ioredis}`], { cwd: dir, stdio: 'inherit', env: { ...process.env, npm_config_prefer_offline: 'true' } });
    writeFileSync(join(dir, 'probe.mjs'), probe);
    const got = execFileSync(process.execPath, ['probe.mjs'], { cwd: dir, encoding: 'utf8', env: { ...process.env, REDIS_URL: `redis://127.0.0.1:${port}` }, timeout: 30_000 });
    if (!got.includes('probe ok')) fail(`npm install of ${how} does not work: ${got}`);
  }
  console.log(`pack-check: ${packed[0].filename} (${files.length} files), packed from a clean copy, installs into an empty project; the README's and the front page's examples, the CommonJS entry and the types work; npm install of a clean folder and of a git clone's node/ work too`);
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
