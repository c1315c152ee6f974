// Client CPU per lease (issue #44): the Node process's own CPU (process.cpuUsage, user +
// system) per lease (acquire + release) on one redis-server without the module, the library's
// two FCALLs sent raw from ioredis against the Locker (which loads the library itself), one
// lease at a time on one ioredis client. Contenders alternate in batches within each round (the
// order flipping every batch) so load on a shared machine lands on all alike; medians of rounds.
// `--before DIR` adds a second Locker built from another checkout (its node/dist), so an old
// and a new build are compared in one sitting.
//
// Usage: node benches/lease_cpu.mjs [--before /tmp/node-before] [--rounds 7] [--leases 5000]
//        [--node-redis]   (`npm run build` in node/ first)
import { spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { freePort, waitFor } from './support/ports.mjs';
import { median } from './support/rounds.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..');
const need = createRequire(join(repo, 'node/package.json'));
const load = async (name) => import(pathToFileURL(need.resolve(name)).href);
const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const before = arg('--before', undefined);
const ROUNDS = Number(arg('--rounds', '7'));
const LEASES = Number(arg('--leases', '5000'));
const BATCH = 250;
const nodeRedis = process.argv.includes('--node-redis');

const lockerOf = async (root) => (await import(pathToFileURL(join(root, 'node/dist/esm/index.js')).href)).Locker;
const Locker = await lockerOf(repo);
const OldLocker = before ? await lockerOf(before) : undefined;

const port = await freePort(26950);
const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
let client;
let raw;
try {
  await waitFor(port);
  if (nodeRedis) {
    const { createClient } = await load('redis');
    client = createClient({ url: `redis://127.0.0.1:${port}` });
    client.on('error', () => {});
    await client.connect();
    raw = (args) => client.sendCommand(args);
  } else {
    const { Redis } = await load('ioredis');
    client = new Redis({ host: '127.0.0.1', port, stringNumbers: true });
    client.on('error', () => {});
    raw = (args) => client.callBuffer(...args);
  }
  const token = 'n'.repeat(32);
  const contenders = {};
  // The Locker loads the library at its first request; its floor and wake-up keys of the raw
  // key are the ones the library names when refusing a wrong floor key.
  const locker = new Locker(client, { ttl: 10_000 });
  await (await locker.acquire('lease:warm')).release();
  const rawKey = 'lease:raw';
  const refusal = await raw(['FCALL', 'fencedlock_acquire', '2', rawKey, 'fencedlock:fn-floor:{000000}', token, '10000']).catch((e) => e.message);
  const floor = /this lock key's is (\S+)/.exec(String(refusal))?.[1] ?? 'fencedlock:fn-floor:{000000}';
  const wake = `fencedlock:fn-wake:${floor.slice('fencedlock:fn-floor:'.length)}:${rawKey}`;
  contenders['raw FCALLs'] = async () => {
    if ((await raw(['FCALL', 'fencedlock_acquire', '2', rawKey, floor, token, '10000'])) === null) throw new Error('refused');
    if (Number(await raw(['FCALL', 'fencedlock_release', '3', rawKey, floor, wake, token])) !== 1) throw new Error('not released');
  };
  if (OldLocker) {
    const old = new OldLocker(client, { ttl: 10_000 });
    contenders['Locker (before)'] = async () => (await old.acquire('lease:before')).release();
  }
  contenders['Locker'] = async () => (await locker.acquire('lease:locker')).release();

  const cpu = Object.fromEntries(Object.keys(contenders).map((n) => [n, []]));
  const wall = Object.fromEntries(Object.keys(contenders).map((n) => [n, []]));
  for (const run of Object.values(contenders)) for (let i = 0; i < 500; i++) await run();
  const loads = [loadavg()[0]];
  for (let round = 0; round < ROUNDS; round++) {
    const spentCpu = Object.fromEntries(Object.keys(contenders).map((n) => [n, 0]));
    const spentWall = { ...spentCpu };
    for (let b = 0; b < LEASES / BATCH; b++) {
      const order = Object.entries(contenders);
      if (b % 2 === 1) order.reverse();
      for (const [name, run] of order) {
        const c0 = process.cpuUsage();
        const t0 = performance.now();
        for (let i = 0; i < BATCH; i++) await run();
        const c = process.cpuUsage(c0);
        spentWall[name] += performance.now() - t0;
        spentCpu[name] += c.user + c.system;
      }
    }
    for (const name of Object.keys(contenders)) {
      cpu[name].push(spentCpu[name] / LEASES);
      wall[name].push((spentWall[name] * 1000) / LEASES);
    }
    loads.push(loadavg()[0]);
  }
  console.log(`\nclient ${nodeRedis ? 'node-redis' : 'ioredis'}, ${ROUNDS} rounds of ${LEASES} leases each, load average ${Math.min(...loads).toFixed(1)}-${Math.max(...loads).toFixed(1)}`);
  console.log('| contender | client CPU µs per lease (median) | over raw (median of rounds) | wall µs per lease |');
  console.log('| --- | ---: | ---: | ---: |');
  const base = cpu['raw FCALLs'];
  for (const name of Object.keys(contenders)) {
    const over = median(cpu[name].map((c, i) => c - base[i]));
    console.log(`| ${name} | ${median(cpu[name]).toFixed(1)} | +${over.toFixed(1)} | ${median(wall[name]).toFixed(0)} |`);
  }
} finally {
  if (nodeRedis) await client?.destroy?.();
  else client?.disconnect();
  server.kill();
}
