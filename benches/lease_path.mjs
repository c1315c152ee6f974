// The Node package's own CPU per lease (issue #44), without a server or a socket: the Locker
// over a stand-in ioredis client whose callBuffer answers at once (a resolved promise: a fence
// for fencedlock_acquire, 1 for fencedlock_release), against the same two calls made raw on the
// stand-in. What is left is the package's per-request path alone (words, tokens, promises,
// timeouts, replies, the Lease), free of the syscalls and scheduling that make the
// server-backed figures (lease_cpu.mjs) noisy on a shared machine. `--before DIR` adds a
// Locker built from another checkout (its node/dist). Rounds alternate; medians.
//
// Usage: node benches/lease_path.mjs [--before /tmp/node-before] [--rounds 9] [--leases 50000]
import { join, dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { median } from './support/rounds.mjs';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const before = arg('--before', undefined);
const ROUNDS = Number(arg('--rounds', '9'));
const LEASES = Number(arg('--leases', '50000'));

const packageOf = async (root) => import(pathToFileURL(join(root, 'node/dist/esm/index.js')).href);

/** Enough of an ioredis `Redis` (v5, `stringNumbers`) for a Locker on the Functions engine. */
function standIn(version) {
  const answer = (name, args) => {
    if (name === 'FCALL' && args[0] === 'fencedlock_acquire') return '7';
    if (name === 'FCALL' && args[0] === 'fencedlock_release') return '1';
    if (name === 'FCALL_RO') return String(version + 1); // a newer library: nothing is loaded
    throw new Error(`the stand-in does not answer ${name} ${String(args[0])}`);
  };
  return {
    isCluster: false,
    status: 'ready',
    options: { stringNumbers: true, host: '127.0.0.1', port: 6379 },
    callBuffer: (name, ...args) => Promise.resolve(answer(name, args)),
    duplicate() {
      throw new Error('not duplicated');
    },
    disconnect() {},
    connect: async () => {},
    on() {},
  };
}

const contenders = {};
const raw = standIn(0);
contenders['raw calls'] = async () => {
  await raw.callBuffer('FCALL', 'fencedlock_acquire', '2', 'lease:raw', 'fencedlock:fn-floor:{000000}', 'n'.repeat(32), '10000');
  await raw.callBuffer('FCALL', 'fencedlock_release', '3', 'lease:raw', 'fencedlock:fn-floor:{000000}', 'fencedlock:fn-wake:{000000}:lease:raw', 'n'.repeat(32));
};
for (const [name, root] of [...(before ? [['Locker (before)', before]] : []), ['Locker', repo]]) {
  const pkg = await packageOf(root);
  const locker = new pkg.Locker(standIn(pkg.LIBRARY_VERSION), { ttl: 10_000, engine: 'functions' });
  contenders[name] = async () => (await locker.acquire('lease:locker')).release();
}

const ns = Object.fromEntries(Object.keys(contenders).map((n) => [n, []]));
for (const run of Object.values(contenders)) for (let i = 0; i < 5000; i++) await run();
for (let round = 0; round < ROUNDS; round++) {
  const order = Object.entries(contenders);
  if (round % 2 === 1) order.reverse();
  for (const [name, run] of order) {
    const c0 = process.cpuUsage();
    for (let i = 0; i < LEASES; i++) await run();
    const c = process.cpuUsage(c0);
    ns[name].push(((c.user + c.system) * 1000) / LEASES);
  }
}
console.log(`\n${ROUNDS} rounds of ${LEASES} leases, no server (a stand-in client answering at once)`);
console.log('| contender | CPU ns per lease (median) | over raw (median of rounds) |');
console.log('| --- | ---: | ---: |');
for (const name of Object.keys(contenders)) {
  const over = median(ns[name].map((t, i) => t - ns['raw calls'][i]));
  console.log(`| ${name} | ${median(ns[name]).toFixed(0)} | +${over.toFixed(0)} |`);
}
