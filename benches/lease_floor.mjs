// The lease ladder of lease_floor.lua as a Node client sees it (issue #44): one lease at a
// time (acquire + release) through ioredis on one redis-server without the module, `redlock` 4
// against the ladder's rungs called with FCALL and the fencedlock Locker (which loads the
// Functions library itself, as on a managed service). Rounds of batches of 50 leases, the
// contenders' order flipping every batch (as node_locks.mjs); µs per lease is the median of
// rounds, each ratio the median of per-round ratios to redlock's.
//
// Usage: node benches/lease_floor.mjs [--quick]   (`npm run build` in node/ first)
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { freePort, waitFor } from './support/ports.mjs';
import { leaseRounds, printLeases } from './support/rounds.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..');
const need = createRequire(join(repo, 'node/package.json'));
const load = async (name) => import(pathToFileURL(need.resolve(name)).href);
const { Redis } = await load('ioredis');
const RedlockV4 = (await load('redlock')).default;
const { Locker } = await import(pathToFileURL(join(repo, 'node/dist/esm/index.js')).href);

const quick = process.argv.includes('--quick');
const ROUNDS = quick ? 3 : 7;
const LEASES = quick ? 300 : 1500;
const TTL = '10000';

const port = await freePort(26900);
const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
const client = new Redis({ host: '127.0.0.1', port, stringNumbers: true });
client.on('error', () => {});
try {
  await waitFor(port);
  await client.call('FUNCTION', 'LOAD', 'REPLACE', readFileSync(join(here, 'lease_floor.lua'), 'utf8'));
  const token = 'n'.repeat(32);
  const rung = (acquire, release, extra) => async (key) => {
    const fence = await client.call('FCALL', acquire, 1 + extra.length, key, ...extra, token, TTL);
    if (fence === null || fence === 0 || fence === '0') throw new Error(`${acquire}: refused`);
    if (Number(await client.call('FCALL', release, 1, key, token)) !== 1) throw new Error(`${release}: not released`);
  };
  // The library's own functions called as the ladder's are: its server time without the
  // Locker's client work. The one key's floor is the one its refusal of another names.
  const key = 'lease:the library (FCALL from ioredis)';
  await client.call('FUNCTION', 'LOAD', 'REPLACE', readFileSync(join(repo, 'protocol/src/functions.lua'), 'utf8'));
  const refusal = await client.call('FCALL', 'fencedlock_acquire', 2, key, 'fencedlock:fn-floor:{000000}', token, TTL).catch((e) => e.message);
  const floor = /this lock key's is (\S+)/.exec(String(refusal))?.[1] ?? 'fencedlock:fn-floor:{000000}';
  const wake = `fencedlock:fn-wake:${floor.slice('fencedlock:fn-floor:'.length)}:${key}`;
  const redlock = new RedlockV4([client], { retryCount: 0 });
  const locker = new Locker(client, { ttl: 10_000 });
  const contenders = {
    redlock: async (key) => (await redlock.lock(key, 10_000)).unlock(),
    fenced: rung('fenced_acquire', 'fenced_release', ['ladder:counter']),
    '+ epochs': rung('epochs_acquire', 'fenced_release', ['ladder:floor']),
    '+ lock record': rung('record_acquire', 'record_release', ['ladder:floor']),
    'the library (FCALL from ioredis)': async (k) => {
      if ((await client.call('FCALL', 'fencedlock_acquire', 2, k, floor, token, TTL)) === null) throw new Error('refused');
      if (Number(await client.call('FCALL', 'fencedlock_release', 3, k, floor, wake, token)) !== 1) throw new Error('not released');
    },
    'fencedlock (the Locker)': async (key) => (await locker.acquire(key)).release(),
  };
  printLeases('lease (acquire + release), ioredis, no module', await leaseRounds(contenders, 'redlock', { rounds: ROUNDS, leases: LEASES }), 'redlock');
} finally {
  client.disconnect();
  server.kill();
}
