#!/usr/bin/env node
// The Node package against redlock (v4, the one npm installs by default), its maintained fork
// @sesamecare-oss/redlock and redis-semaphore's Mutex, side by side in one run (issues 33, 44):
//   1. one uncontended lease (acquire + release), one at a time, on a Redis 7.0 with the module:
//      time per lease through ioredis and node-redis, the Functions engine forced on the same
//      server, and the two raw commands (SET NX PX + EVALSHA compare-and-delete) as the floor.
//   2. the same on a second redis-server started without the module (as on a managed service,
//      where the locker loads the Functions library itself): the Node lease through ioredis and
//      node-redis against redlock 4 and redis-semaphore's Mutex on that server.
//      Both: alternating rounds; the ratio is the median of the per-round ratios (this machine
//      is shared and noisy).
//   3. a hot key: 32 concurrent holders, each holding ~1 ms, for a few seconds: grants/s and
//      the fewest grants any holder got (fencedlock waits on the server; redlock retries).
// Usage: node benches/node_locks.mjs [--quick] [--out FILE.json]
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { freePort, waitFor } from './support/ports.mjs';
import { leaseRounds, printLeases } from './support/rounds.mjs';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..');
const need = createRequire(join(repo, 'node/package.json'));
const load = async (name) => import(pathToFileURL(need.resolve(name)).href);
const { Redis } = await load('ioredis');
const { createClient } = await load('redis');
const RedlockV4 = (await load('redlock')).default;
const { Redlock: SesameRedlock } = await load('@sesamecare-oss/redlock');
const { Mutex } = await load('redis-semaphore');
const { Locker } = await import(pathToFileURL(join(repo, 'node/dist/esm/index.js')).href);

const quick = process.argv.includes('--quick');
const outAt = process.argv.indexOf('--out');
const out = outAt > 0 ? process.argv[outAt + 1] : undefined;
const ROUNDS = quick ? 3 : 7;
const LEASES = quick ? 300 : 1500;
const HOT_SECONDS = quick ? 1.5 : 4;
const HOLDERS = 32;
const module = process.env.FENCEDLOCK_MODULE ?? join(repo, 'target/release/libfencedlock_module.so');

const startServer = (port, extra) =>
  spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extra], { stdio: 'ignore' });
const port = await freePort(26800);
const server = startServer(port, ['--loadmodule', module]);
// The managed path: a server without the module, as a managed service runs it.
const barePort = await freePort(port + 1);
const bare = startServer(barePort, []);
const clients = [];
const redis = (options = {}, at = port) => {
  const c = new Redis({ host: '127.0.0.1', port: at, ...options });
  c.on('error', () => {});
  clients.push(c);
  return c;
};
const nodeRedisClients = [];
const nodeRedis = async (at) => {
  const c = createClient({ socket: { host: '127.0.0.1', port: at } });
  c.on('error', () => {});
  await c.connect();
  nodeRedisClients.push(c);
  return c;
};
const fencedLease = (client, options = {}) => {
  const locker = new Locker(client, { ttl: 10_000, ...options });
  return async (key) => (await locker.acquire(key)).release();
};
const redlockLease = (client) => {
  const r = new RedlockV4([client], { retryCount: 0 });
  return async (key) => (await r.lock(key, 10_000)).unlock();
};


try {
  await waitFor(port);
  await waitFor(barePort);
  const shared = redis();
  const exact = redis({ stringNumbers: true });
  const cad = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
  shared.defineCommand('cad', { numberOfKeys: 1, lua: cad });
  const contenders = {
    fencedlock: fencedLease(exact),
    'fencedlock (node-redis)': fencedLease(await nodeRedis(port)),
    'fencedlock (functions engine)': fencedLease(exact, { engine: 'functions' }),
    redlock: redlockLease(shared),
    '@sesamecare-oss/redlock': (() => {
      const r = new SesameRedlock([shared], { retryCount: 0 });
      return async (key) => (await r.acquire([key], 10_000)).release();
    })(),
    'raw SET NX PX + EVALSHA': async (key) => {
      await shared.set(key, 'value', 'PX', 10_000, 'NX');
      await shared.cad(key, 'value');
    },
  };

  // 1. One lease at a time, with the module.
  const lease = await leaseRounds(contenders, 'redlock', { rounds: ROUNDS, leases: LEASES });
  console.error('node_locks: one lease at a time with the module done; without it');

  // 2. One lease at a time on the server without the module: each locker loads the library.
  const bareShared = redis({}, barePort);
  const managed = await leaseRounds(
    {
      fencedlock: fencedLease(redis({ stringNumbers: true }, barePort)),
      'fencedlock (node-redis)': fencedLease(await nodeRedis(barePort)),
      redlock: redlockLease(bareShared),
      // No refresh timer: a fencedlock lease from `acquire` is not kept alive either.
      'redis-semaphore Mutex': async (key) => {
        const mutex = new Mutex(bareShared, key, { lockTimeout: 10_000, acquireAttemptsLimit: 1, refreshInterval: 0 });
        if (!(await mutex.tryAcquire())) throw new Error(`${key} was held`);
        await mutex.release();
      },
    },
    'redlock',
    { rounds: ROUNDS, leases: LEASES },
  );
  console.error('node_locks: one lease at a time without the module done; the hot key');

  // 3. The hot key.
  const hot = {};
  const hold = () => sleep(1);
  const contest = async (name, take) => {
    const grants = new Array(HOLDERS).fill(0);
    const until = performance.now() + HOT_SECONDS * 1000;
    const holdersDone = Array.from({ length: HOLDERS }, async (_, h) => {
      while (performance.now() < until) {
        const release = await take(until);
        if (!release) continue;
        grants[h]++;
        await hold();
        await release();
      }
    });
    const start = performance.now();
    await Promise.all(holdersDone);
    const secs = (performance.now() - start) / 1000;
    const total = grants.reduce((a, b) => a + b, 0);
    hot[name] = { grants_per_s: total / secs, fewest_grants: Math.min(...grants), most_grants: Math.max(...grants) };
  };
  for (const engine of ['module', 'functions']) {
    const locker = new Locker(redis({ stringNumbers: true }), { ttl: 10_000, engine, maxBlocking: HOLDERS });
    await contest(engine === 'module' ? 'fencedlock (waits on the server)' : 'fencedlock, functions engine (woken by releases)', async (until) => {
      const lease = await locker.acquire(`hot:${engine}`, { wait: Math.max(1, until - performance.now()) });
      return lease ? () => lease.release() : undefined;
    });
    await locker.close();
  }
  // redlock retries until its retry budget (the contest's length) is spent; a lock won after
  // the contest ended is unlocked at once.
  const retried = (label, key, acquire) =>
    contest(label, async (until) => {
      const attempt = acquire(key).catch(() => undefined);
      const lock = await Promise.race([attempt, sleep(Math.max(1, until - performance.now())).then(() => undefined)]);
      if (!lock) {
        void attempt.then((late) => late?.release?.().catch?.(() => {}));
        return undefined;
      }
      return () => lock.release();
    });
  for (const [label, delay, jitter] of [['redlock (default retries: 200 ms ± 200)', 200, 200], ['redlock (fast retries: 10 ms ± 10)', 10, 10]]) {
    const r = new RedlockV4([shared], { retryCount: Math.ceil((HOT_SECONDS * 1000) / delay), retryDelay: delay, retryJitter: jitter });
    await retried(label, `hot:redlock:${delay}`, async (key) => {
      const lock = await r.lock(key, 10_000);
      return { release: () => lock.unlock() };
    });
  }
  const sesame = new SesameRedlock([shared], { retryCount: Math.ceil((HOT_SECONDS * 1000) / 200), retryDelay: 200, retryJitter: 200 });
  await retried('@sesamecare-oss/redlock (default retries)', 'hot:sesame', (key) => sesame.acquire([key], 10_000));
  const rtt = lease['raw SET NX PX + EVALSHA'].us_per_lease / 2 / 1000;
  const limit = 1000 / (1.1 + rtt);

  const result = { redis: 'Redis 7.0', rounds: ROUNDS, leases_per_round: LEASES, hot_seconds: HOT_SECONDS, holders: HOLDERS, lease, managed, hot, limit_grants_per_s: limit };
  printLeases('one lease (acquire + release), with the module', lease, 'redlock');
  printLeases('one lease, without the module (the Functions library, as on a managed service)', managed, 'redlock');
  console.log(`\n| hot key, ${HOLDERS} holders of ~1 ms, ${HOT_SECONDS} s | grants/s | ÷ redlock (default retries) | fewest grants of a holder | most |`);
  console.log('| --- | ---: | ---: | ---: | ---: |');
  const base = hot['redlock (default retries: 200 ms ± 200)'].grants_per_s;
  for (const [name, r] of Object.entries(hot)) console.log(`| ${name} | ${r.grants_per_s.toFixed(0)} | ${(r.grants_per_s / base).toFixed(2)}× | ${r.fewest_grants} | ${r.most_grants} |`);
  console.log(`\n(the limit one holder at a time allows: 1 / (1.1 ms hold + one round trip) ≈ ${limit.toFixed(0)} grants/s)`);
  if (out) writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
} finally {
  for (const c of clients) c.disconnect();
  for (const c of nodeRedisClients) c.destroy();
  server.kill('SIGKILL');
  bare.kill('SIGKILL');
}
