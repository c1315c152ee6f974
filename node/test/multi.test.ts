/**
 * `acquireAll` / `tryAcquireAll`: several keys, all or none. On a server whose module serves
 * `FENCEDLOCK.ACQUIREALL` the set is one command for one token (counted in `INFO
 * commandstats`, the token read back from `SLOWLOG`); so it is on the Functions library and
 * its script form for keys of one slot (one `fencedlock_acquireall`, the slot's floor key
 * last). A busy key refuses the set without creating any other key; a waiter holds nothing
 * until the whole set is free; a retry after a lost reply re-enters with the same token.
 * Elsewhere (keys of several slots on the library or on a Cluster, Redlock, a server that
 * hides `COMMAND`, more than 64 keys) key by key, each key its own token, and no ACQUIREALL is
 * ever sent. Callers naming overlapping sets in opposite orders never deadlock and never both
 * hold, on every engine. Both clients throughout.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Cluster } from 'ioredis';
import { createCluster } from 'redis';
import { ContendedError, InvalidArgumentError, Leases, Locker, Redlock, ServerError, floorKey, type Engine, type LockerOptions } from 'fencedlock';
import { keySlot } from '../src/protocol.js';
import { CLIENTS, client, withLocker, withLockerAndRival, type ClientKind } from './support/clients.js';
import { TestServer, callsOf, commandCalls, type Setup } from './support/servers.js';
import { suiteServer, suiteCluster } from './support/suites.js';

/** `errorstat_ERR`'s count in `INFO errorstats` (0 before any `ERR` reply). */
async function errCount(server: TestServer): Promise<number> {
  const info = String(await server.admin(['INFO', 'errorstats']));
  return Number(/^errorstat_ERR:count=(\d+)/m.exec(info)?.[1] ?? 0);
}

async function exists(server: TestServer, key: string): Promise<number> {
  return Number(await server.admin(['EXISTS', key]));
}

/** The holders `STATUS` shows on `key` (through the locker: either engine). */
async function holders(locker: Locker, key: string): Promise<number> {
  return (await locker.status(key))?.holders.length ?? 0;
}

/** Every `SLOWLOG` entry's arguments, oldest first (the server logs every command while the threshold is 0). */
async function slowlog(server: TestServer): Promise<string[][]> {
  const reply = await server.admin(['SLOWLOG', 'GET', '100000']);
  assert.ok(Array.isArray(reply));
  return reply
    .map((entry) => (Array.isArray(entry) && Array.isArray(entry[3]) ? entry[3].map(String) : []))
    .reverse();
}

function fencesRise(leases: Leases): void {
  const fences = [...leases].map((lease) => lease.fence);
  for (let i = 1; i < fences.length; i++) assert.ok((fences[i] ?? 0n) > (fences[i - 1] ?? 0n), `fences rise in the order named: ${fences.join(', ')}`);
}

/** A lock command as `SLOWLOG` shows it, on either engine: the function, its keys, and the arguments after them. */
interface LockCall {
  readonly fn: string;
  readonly keys: string[];
  readonly args: string[];
}

/**
 * The lock commands among `log`, each named as the library names it (`fencedlock_acquireall`):
 * the library's `FCALL fn n keys… args…` or `EVALSHA sha n keys… fn args…`, and the module's
 * `FENCEDLOCK.ACQUIREALL n keys… args…` or `FENCEDLOCK.<NAME> key args…`.
 */
function lockCalls(log: readonly string[][]): LockCall[] {
  const calls: LockCall[] = [];
  for (const argv of log) {
    const name = argv[0]?.toUpperCase() ?? '';
    const n = Number(argv[2]);
    if (name === 'FCALL' || name === 'FCALL_RO') calls.push({ fn: argv[1] ?? '', keys: argv.slice(3, 3 + n), args: argv.slice(3 + n) });
    if (name === 'EVALSHA' || name === 'EVALSHA_RO') calls.push({ fn: argv[3 + n] ?? '', keys: argv.slice(3, 3 + n), args: argv.slice(4 + n) });
    if (name === 'FENCEDLOCK.ACQUIREALL') {
      const count = Number(argv[1]);
      calls.push({ fn: 'fencedlock_acquireall', keys: argv.slice(2, 2 + count), args: argv.slice(2 + count) });
    } else if (name.startsWith('FENCEDLOCK.')) {
      calls.push({ fn: `fencedlock_${name.slice('FENCEDLOCK.'.length).toLowerCase()}`, keys: argv.slice(1, 2), args: argv.slice(2) });
    }
  }
  return calls;
}

function callsTo(calls: readonly LockCall[], fn: string): LockCall[] {
  return calls.filter((call) => call.fn === fn);
}

/** Logs every command from now on (`SLOWLOG`, threshold 0), from an empty log and zeroed `INFO commandstats`. */
async function logEverything(server: TestServer): Promise<void> {
  await server.admin(['CONFIG', 'RESETSTAT']);
  await server.admin(['CONFIG', 'SET', 'slowlog-max-len', '100000']);
  await server.admin(['SLOWLOG', 'RESET']);
  await server.admin(['CONFIG', 'SET', 'slowlog-log-slower-than', '0']);
}

/** Stops logging and hands back the lock commands logged. */
async function loggedCalls(server: TestServer): Promise<LockCall[]> {
  await server.admin(['CONFIG', 'SET', 'slowlog-log-slower-than', '10000']);
  return lockCalls(await slowlog(server));
}

function slotsOf(keys: readonly string[]): Set<number> {
  return new Set(keys.map((key) => keySlot(Buffer.from(key))));
}

/** An engine that takes a set of one slot in one call, and how the tests see that call. */
interface Form {
  readonly engine: Engine;
  /** The server to start. */
  readonly setup: Setup;
  /** The suite's name. */
  readonly title: string;
  /** The command a set is, as `INFO commandstats` counts it. */
  readonly command: string;
  /** The command each key is when a set goes key by key, as `INFO commandstats` counts it. */
  readonly keyCommand: string;
  /** The keys the set's one call names: the module's the keys as named; the library's those, then their floor key. */
  callKeys(keys: readonly string[]): string[];
  /**
   * Whether a test that counts commands first warms its lockers (the engine detected, its
   * commands sent before the count): the library's detection sends `FCALL`s (`EVALSHA`s) of
   * its own, while on the module a cold locker's `COMMAND INFO`s are part of what is counted.
   */
  readonly warm: boolean;
}

/** The library's keys of a set: the keys as named, then their floor key. */
function withFloor(keys: readonly string[]): string[] {
  return [...keys, floorKey(keys[0] ?? '')];
}

/**
 * The module (`FENCEDLOCK.ACQUIREALL`), the Functions library (`FCALL`), and the library's
 * script (`EVALSHA`) where `FUNCTION` is denied: a set of one slot is one call for one token on
 * each.
 */
const FORMS: readonly Form[] = [
  { engine: 'module', setup: 'module', title: 'acquireAll on the module: one ACQUIREALL', command: 'fencedlock.acquireall', keyCommand: 'fencedlock.acquire', callKeys: (keys) => [...keys], warm: false },
  { engine: 'functions', setup: 'managed', title: 'acquireAll on the library (functions): keys of one slot in one fencedlock_acquireall', command: 'fcall', keyCommand: 'fcall', callKeys: withFloor, warm: true },
  { engine: 'script', setup: 'managed-no-function', title: 'acquireAll on the library (script): keys of one slot in one fencedlock_acquireall', command: 'evalsha', keyCommand: 'evalsha', callKeys: withFloor, warm: true },
];

/** The two library forms: the Functions library (`FCALL`), and its script (`EVALSHA`) where `FUNCTION` is denied. */
const LIBRARY_FORMS = FORMS.filter((form) => form.engine !== 'module');

for (const form of FORMS) {
  const { engine, setup, command } = form;
  const module = engine === 'module';
  const CALL = module ? 'ACQUIREALL' : command.toUpperCase();
  describe(form.title, () => {
    const server = suiteServer({ setup });

    /**
     * A locker on its own client; `warm`: with the engine known (its detection's commands done
     * before the test's).
     */
    async function openLocker(kind: ClientKind, options: LockerOptions = {}, warm = true): Promise<{ locker: Locker; close(): Promise<void> }> {
      const c = await client(kind, server().port);
      const locker = new Locker(c.client, { ttl: 10_000, ...options });
      const close = async (): Promise<void> => {
        await locker.close();
        await c.close();
      };
      if (!warm) return { locker, close };
      try {
        await (await locker.acquireAll([`{warm}:${kind}:${Math.random()}`])).release();
        assert.equal(await locker.engine(), engine);
      } catch (err) {
        await close();
        throw err;
      }
      return { locker, close };
    }

    for (const kind of CLIENTS) {
      test(`${kind}: a set of one slot is one ${CALL} for one token, ${module ? 'its keys as named' : 'the floor key last'}, fences rising in the order named, each key held`, async () => {
        const { locker, close } = await openLocker(kind, {}, form.warm);
        const tag = `{one-${kind}-${engine}}`;
        const keys = [`${tag}:b`, `${tag}:c`, `${tag}:a`];
        try {
          await logEverything(server());
          const leases = await locker.acquireAll(keys);
          const stats = await commandCalls(server());
          assert.equal(callsOf(stats, command), 1, `one ${CALL}`);
          if (module) {
            assert.equal(callsOf(stats, 'fencedlock.acquire'), 0, 'no ACQUIRE');
            assert.equal(callsOf(stats, 'command|info'), 2, 'COMMAND INFO for the engine, then for ACQUIREALL');
          }
          assert.ok(leases instanceof Leases);
          assert.equal(leases.size, 3);
          assert.deepEqual([...leases].map((lease) => lease.key), keys, 'the leases in the order named');
          assert.deepEqual(leases.keys, keys);
          fencesRise(leases);
          for (const key of keys) {
            const lease = leases.get(key);
            assert.ok(lease && lease.key === key && lease.isValid(), `${key}: a valid lease`);
            const status = await locker.status(key);
            assert.equal(status?.fence, lease.fence, `STATUS of ${key} shows its fence`);
            assert.equal(status?.holders.length, 1);
            assert.equal(status?.holders[0]?.fence, lease.fence, `STATUS of ${key} shows its holder's fence`);
          }
          assert.equal(leases.get('not-in-the-set'), undefined);
          assert.equal(await leases.release(), true, 'each was still held');
          for (const key of keys) assert.equal(await holders(locker, key), 0, `${key} released`);

          // One token: the one call's, and every lease released with it.
          const calls = await loggedCalls(server());
          const all = callsTo(calls, 'fencedlock_acquireall');
          assert.equal(all.length, 1, 'one fencedlock_acquireall');
          assert.equal(callsTo(calls, 'fencedlock_acquire').length, 0, 'no key by key');
          assert.deepEqual(all[0]?.keys, form.callKeys(keys), module ? 'the keys in the order named' : 'the keys in the order named, then their floor key');
          const token = all[0]?.args[0];
          assert.match(token ?? '', /^[0-9a-f]{32}$/);
          const releases = callsTo(calls, 'fencedlock_release');
          assert.deepEqual(releases.map((call) => call.keys[0]).sort(), [...keys].sort());
          for (const call of releases) assert.equal(call.args[0], token, `${call.keys[0]} released with the set's one token`);

          // Asked once per server: another set sends no COMMAND INFO.
          const again = await locker.acquireAll([`${tag}:d`, `${tag}:e`]);
          if (module) {
            const later = await commandCalls(server());
            assert.equal(callsOf(later, command), 2);
            assert.equal(callsOf(later, 'command|info'), 2, 'the answer is cached');
          }
          assert.ok(again.isValid());
          await again.release();

          // tryAcquireAll takes the same path.
          await server().admin(['CONFIG', 'RESETSTAT']);
          const tried = await locker.tryAcquireAll([`${tag}:f`, `${tag}:g`]);
          assert.equal(callsOf(await commandCalls(server()), command), 1);
          assert.ok(tried.isValid());
          await tried.release();
        } finally {
          await server().admin(['CONFIG', 'SET', 'slowlog-log-slower-than', '10000']);
          await close();
        }
      });

      test(`${kind}: a busy key refuses the set, the error names it, and no other key is created`, async () => {
        const { locker, close } = await openLocker(kind, {}, form.warm);
        const rival = await openLocker(kind, {}, form.warm);
        const tag = `{busy-${kind}-${engine}}`;
        const [a, b, cc] = [`${tag}:a`, `${tag}:b`, `${tag}:c`];
        try {
          const held = await rival.locker.acquire(b);
          assert.ok(held);
          await logEverything(server());
          const once = await locker.tryAcquireAll([a, b, cc]).catch((e: unknown) => e);
          assert.ok(once instanceof ContendedError, String(once));
          assert.equal(once.key, b, 'names the key held');
          const started = performance.now();
          const waited = await locker.acquireAll([cc, b, a], { wait: 400 }).catch((e: unknown) => e);
          assert.ok(waited instanceof ContendedError, String(waited));
          assert.equal(waited.key, b);
          assert.ok(performance.now() - started >= 400, 'waited the wait out');
          assert.equal(await exists(server(), a), 0, `${a} never created`);
          assert.equal(await exists(server(), cc), 0, `${cc} never created`);
          if (module) {
            const stats = await commandCalls(server());
            assert.ok(callsOf(stats, command) >= 3, 'whole attempts, retried');
            assert.equal(callsOf(stats, 'fencedlock.acquire'), 0);
          }
          const calls = await loggedCalls(server());
          assert.ok(callsTo(calls, 'fencedlock_acquireall').length >= 3, 'whole attempts, retried');
          assert.equal(callsTo(calls, 'fencedlock_acquire').length, 0, 'no key by key');
          assert.equal(new Set(callsTo(calls, 'fencedlock_acquireall').slice(1).map((call) => call.args[0])).size, 1, 'the waiting call retries with one token');
          assert.equal((await rival.locker.status(b))?.holders[0]?.fence, held.fence, 'the holder keeps its lease');
          await held.release();
          const leases = await locker.tryAcquireAll([a, b, cc]);
          assert.ok([...leases].every((lease) => lease.fence > 0n));
          assert.ok(leases.isValid());
          assert.ok((leases.get(b)?.fence ?? 0n) > held.fence);
          await leases.release();
        } finally {
          await server().admin(['CONFIG', 'SET', 'slowlog-log-slower-than', '10000']);
          await close();
          await rival.close();
        }
      });

      if (module) {
        test(`${kind}: a waiter holds nothing meanwhile and gets the set right after the last key is released`, async () => {
          const [a, b, cc] = [`wait:${kind}:a`, `wait:${kind}:b`, `wait:${kind}:c`];
          await withLockerAndRival(kind, server().port, async (locker, rival) => {
            const heldB = await rival.acquire(b);
            const heldC = await rival.acquire(cc);
            assert.ok(heldB && heldC);
            let settled = false;
            const waiting = locker.acquireAll([cc, a, b], { wait: 10_000 }).finally(() => (settled = true));
            await sleep(300);
            assert.equal(await exists(server(), a), 0, `the free ${a} is not taken while the others are busy`);
            await heldB.release();
            await sleep(300);
            assert.equal(settled, false, 'still waiting for the last key');
            assert.equal(await exists(server(), a), 0);
            assert.equal(await holders(locker, b), 0, `${b} not held by the waiter either`);
            const releasedAt = performance.now();
            await heldC.release();
            const leases = await waiting;
            const took = performance.now() - releasedAt;
            assert.ok(took < 700, `granted ${took.toFixed(0)} ms after the last release (backoff at most 400 ms)`);
            assert.deepEqual(leases.keys, [cc, a, b]);
            assert.ok((leases.get(b)?.fence ?? 0n) > heldB.fence && (leases.get(cc)?.fence ?? 0n) > heldC.fence);
            await leases.release();
          });
        });
      }

      test(`${kind}: an attempt whose reply was lost is sent again with the same token and re-entered`, async () => {
        // The engine (and, on the module, ACQUIREALL) asked before the stop.
        const { locker, close } = await openLocker(kind, { timeout: 150 });
        const keys = [`{lost-${kind}-${engine}}:a`, `{lost-${kind}-${engine}}:b`];
        try {
          server().signal('SIGSTOP');
          const taking = locker.acquireAll(keys, { wait: 5000 });
          await sleep(600); // a few attempts time out, queued on the stopped server
          server().signal('SIGCONT');
          const leases = await taking;
          for (const lease of leases) {
            const status = await locker.status(lease.key);
            assert.equal(status?.fence, lease.fence, `${lease.key}: the first grant's fence, re-entered`);
            assert.equal(status?.holders.length, 1);
          }
          assert.equal(await leases.release(), true);
        } finally {
          server().signal('SIGCONT');
          await close();
        }
      });

      test(`${kind}: a final attempt that may have been granted releases every key`, async () => {
        const { locker, close } = await openLocker(kind, { timeout: 150 });
        const keys = [`{maybe-${kind}-${engine}}:a`, `{maybe-${kind}-${engine}}:b`];
        try {
          server().signal('SIGSTOP');
          const err = await locker.tryAcquireAll(keys).catch((e: unknown) => e);
          server().signal('SIGCONT');
          assert.ok(err instanceof ServerError && err.kind === 'TimedOut', String(err));
          // The queued call ran once the server went on, and the releases queued after it.
          await sleep(200);
          for (const key of keys) {
            assert.equal(await exists(server(), key), 1, `${key} was granted late`);
            assert.equal(await holders(locker, key), 0, `${key} released by the set's token`);
          }
        } finally {
          server().signal('SIGCONT');
          await close();
        }
      });

      if (!module) {
        test(`${kind}: a ${engine === 'script' ? 'script' : 'library'} the server lost is loaded again, and the set is still taken in one call`, async () => {
          const { locker, close } = await openLocker(kind);
          const keys = [`{reload-${kind}-${engine}}:a`, `{reload-${kind}-${engine}}:b`];
          try {
            await server().admin(engine === 'script' ? ['SCRIPT', 'FLUSH'] : ['FUNCTION', 'DELETE', 'fencedlock']);
            await logEverything(server());
            const leases = await locker.acquireAll(keys);
            const calls = await loggedCalls(server());
            assert.ok(leases.isValid());
            const all = callsTo(calls, 'fencedlock_acquireall');
            assert.ok(all.length >= 1 && new Set(all.map((call) => call.args[0])).size === 1, 'fencedlock_acquireall, sent again with its one token');
            assert.equal(callsTo(calls, 'fencedlock_acquire').length, 0);
            for (const lease of leases) assert.equal((await locker.status(lease.key))?.holders[0]?.fence, lease.fence);
            assert.equal(await leases.release(), true);
          } finally {
            await server().admin(['CONFIG', 'SET', 'slowlog-log-slower-than', '10000']);
            await close();
          }
        });
      }

      test(`${kind}: more than 64 keys of one slot go key by key`, async () => {
        const { locker, close } = await openLocker(kind, {}, form.warm);
        const keys = Array.from({ length: 65 }, (_, i) => `{many-${kind}-${engine}}:${i}`);
        try {
          await server().admin(['CONFIG', 'RESETSTAT']);
          const leases = await locker.acquireAll(keys);
          const calls = await commandCalls(server());
          if (module) assert.equal(callsOf(calls, command), 0);
          assert.equal(callsOf(calls, form.keyCommand), 65, 'one call per key');
          assert.deepEqual(leases.keys, keys);
          assert.equal(await leases.release(), true);
        } finally {
          await close();
        }
      });

      if (module) {
        test(`${kind}: no keys, a key named twice or a bad key is refused before anything is sent`, async () => {
          await withLocker(kind, server().port, undefined, async (locker) => {
            await server().admin(['CONFIG', 'RESETSTAT']);
            for (const keys of [[], ['d:a', 'd:b', 'd:a'], ['d:a', ''], ['d:a', 'd:\n']]) {
              await assert.rejects(locker.acquireAll(keys), InvalidArgumentError, JSON.stringify(keys));
              await assert.rejects(locker.tryAcquireAll(keys), InvalidArgumentError, JSON.stringify(keys));
            }
            await assert.rejects(locker.acquireAll('d:a' as unknown as string[]), InvalidArgumentError);
            await assert.rejects(locker.acquireAll(['d:a'], { ttl: 0 }), InvalidArgumentError);
            const calls = await commandCalls(server());
            assert.deepEqual([...calls.keys()].filter((name) => name !== 'config|resetstat' && name !== 'info'), [], 'nothing sent');
          });
        });
      }
    }
  });
}

describe('acquireAll where the module is not asked: a server that hides COMMAND', () => {
  const server = suiteServer({ setup: 'module', args: ['--user', 'default', 'on', 'nopass', '~*', '&*', '+@all', '-command'] });

  for (const kind of CLIENTS) {
    test(`${kind}: the module engine, key by key, no ACQUIREALL sent`, async () => {
      // The module engine, as configured: the COMMAND INFO that is refused here is ACQUIREALL's.
      await withLocker(kind, server().port, { engine: 'module' }, async (locker) => {
        await server().admin(['CONFIG', 'RESETSTAT']);
        const leases = await locker.acquireAll([`hidden:${kind}:b`, `hidden:${kind}:a`]);
        assert.equal(await locker.engine(), 'module');
        const calls = await commandCalls(server());
        assert.equal(callsOf(calls, 'fencedlock.acquireall'), 0);
        assert.equal(callsOf(calls, 'fencedlock.acquire'), 2);
        assert.deepEqual(leases.keys, [`hidden:${kind}:b`, `hidden:${kind}:a`]);
        assert.equal(await leases.release(), true);
      });
    });
  }
});

describe('acquireAll where COMMAND INFO does not know ACQUIREALL (the module engine forced on a server without it)', () => {
  const server = suiteServer({ setup: 'managed' });

  for (const kind of CLIENTS) {
    test(`${kind}: ACQUIREALL is never sent; the first key's ACQUIRE is the unknown command`, async () => {
      // An ioredis client the locker uses as it is: no connection of its own to open (and
      // count the errors of) after the reset.
      const c = await client(kind, server().port, { stringNumbers: true });
      const locker = new Locker(c.client, { engine: 'module' });
      try {
        await server().admin(['CONFIG', 'RESETSTAT']);
        const err = await locker.acquireAll([`old:${kind}:b`, `old:${kind}:a`]).catch((e: unknown) => e);
        assert.ok(err instanceof ServerError && err.kind === 'NoModule', String(err));
        assert.match(err.message, /unknown command .FENCEDLOCK\.ACQUIRE.,/, 'key by key: the ACQUIRE of the first key in byte order');
        assert.doesNotMatch(err.message, /[0-9a-f]{32}/, 'no token in the error');
        assert.equal(callsOf(await commandCalls(server()), 'command|info'), 1, 'asked with COMMAND INFO first');
        assert.equal(await errCount(server()), 1, 'one unknown command: the first ACQUIRE, nothing after it');
      } finally {
        await locker.close();
        await c.close();
      }
    });
  }
});

for (const { engine, setup } of LIBRARY_FORMS) {
  describe(`acquireAll on the library (${engine}): keys of several slots key by key`, () => {
    const server = suiteServer({ setup });

    for (const kind of CLIENTS) {
      test(`${kind}: every key leased with its own token and fence, no fencedlock_acquireall sent`, async () => {
        const c = await client(kind, server().port);
        const locker = new Locker(c.client, { ttl: 10_000 });
        const keys = [`fn:${kind}:b`, `fn:${kind}:a`, `fn:${kind}:c`];
        try {
          assert.equal(slotsOf(keys).size, keys.length, 'keys of several slots');
          const warm = await locker.acquire(`fn:${kind}:warm`); // engine detection (its errors) first
          assert.ok(warm);
          await warm.release();
          assert.equal(await locker.engine(), engine);
          await logEverything(server());
          const leases = await locker.acquireAll(keys);
          const calls = await loggedCalls(server());
          assert.equal(await errCount(server()), 0, 'no error reply');
          assert.equal(callsTo(calls, 'fencedlock_acquireall').length, 0, 'no fencedlock_acquireall');
          const each = callsTo(calls, 'fencedlock_acquire');
          assert.deepEqual(each.map((call) => call.keys[0]), [...keys].sort(), 'one ACQUIRE per key, in byte order');
          assert.equal(new Set(each.map((call) => call.args[0])).size, keys.length, 'each key its own token');
          assert.deepEqual(leases.keys, keys);
          for (const lease of leases) {
            assert.ok(lease.isValid());
            assert.equal((await locker.status(lease.key))?.fence, lease.fence);
          }
          assert.equal(await leases.release(), true);
          for (const key of keys) assert.equal(await holders(locker, key), 0);
        } finally {
          await server().admin(['CONFIG', 'SET', 'slowlog-log-slower-than', '10000']);
          await locker.close();
          await c.close();
        }
      });

      test(`${kind}: a lease that aged while a later key was awaited is renewed before the call returns`, async () => {
        const c = await client(kind, server().port);
        const r = await client(kind, server().port);
        const TTL = 1200;
        const locker = new Locker(c.client, { ttl: TTL });
        const rival = new Locker(r.client, { ttl: 10_000 });
        const [a, b] = [`fnaged:${kind}:a`, `fnaged:${kind}:b`];
        try {
          assert.equal(slotsOf([a, b]).size, 2, 'keys of two slots');
          const held = await rival.acquire(b);
          assert.ok(held);
          setTimeout(() => void held.release(), 600).unref();
          const started = performance.now();
          const leases = await locker.acquireAll([b, a], { wait: 5000 });
          assert.ok(performance.now() - started >= 550, `${a} was taken, then ${b} awaited`);
          const window = TTL - (TTL * 0.01 + 2);
          for (const lease of leases) {
            assert.ok(lease.remaining() > window * 0.75, `${lease.key}: ${lease.remaining().toFixed(0)} ms of ${window} left`);
            assert.ok(((await locker.status(lease.key))?.holders[0]?.remainingMs ?? 0) > window * 0.75, `${lease.key} renewed on the server too`);
          }
          await leases.release();
        } finally {
          await locker.close();
          await rival.close();
          await c.close();
          await r.close();
        }
      });

      test(`${kind}: a busy key refuses the set and what was taken is released`, async () => {
        const [a, b, cc] = [`fnbusy:${kind}:a`, `fnbusy:${kind}:b`, `fnbusy:${kind}:c`];
        await withLockerAndRival(kind, server().port, async (locker, rival) => {
          assert.equal(slotsOf([a, b, cc]).size, 3, 'keys of several slots');
          const held = await rival.acquire(b);
          assert.ok(held);
          for (const attempt of [() => locker.tryAcquireAll([cc, b, a]), () => locker.acquireAll([cc, b, a], { wait: 300 })]) {
            const err = await attempt().catch((e: unknown) => e);
            assert.ok(err instanceof ContendedError, String(err));
            assert.equal(err.key, b);
            assert.equal(await holders(locker, a), 0, `${a}, taken first in byte order, was released`);
            assert.equal(await exists(server(), cc), 0, `${cc}, after the busy key, never taken`);
          }
          await held.release();
        });
      });
    }
  });
}


describe('overlapping sets named in opposite orders never deadlock, and never both hold', () => {
  const servers: Partial<Record<Setup, TestServer>> = {};
  before(async () => {
    servers.module = await TestServer.start({ setup: 'module' });
    servers.managed = await TestServer.start({ setup: 'managed' });
    servers['managed-no-function'] = await TestServer.start({ setup: 'managed-no-function' });
  });
  after(async () => {
    for (const s of Object.values(servers)) await s.stop();
  });

  type Maker = (c: object) => Locker | Redlock;
  interface Case {
    readonly name: string;
    readonly setup: Setup;
    readonly make: Maker;
    /** Whether each set is one ACQUIREALL (the module's, or the library's fencedlock_acquireall). */
    readonly oneCommand: boolean;
    /** Whether the two keys share a slot (a hash tag). */
    readonly oneSlot: boolean;
  }
  const locker: Maker = (c) => new Locker(c, { ttl: 5000 });
  const cases: Case[] = [
    { name: 'module, one ACQUIREALL', setup: 'module', make: locker, oneCommand: true, oneSlot: false },
    { name: 'module through a Redlock of one master, key by key (queued on the server)', setup: 'module', make: (c) => new Redlock([c], { ttl: 5000 }), oneCommand: false, oneSlot: false },
    { name: 'Functions library, keys of two slots, key by key (woken)', setup: 'managed', make: locker, oneCommand: false, oneSlot: false },
    { name: 'Functions library, keys of one slot, one fencedlock_acquireall', setup: 'managed', make: locker, oneCommand: true, oneSlot: true },
    { name: 'the library as a script, keys of one slot, one fencedlock_acquireall', setup: 'managed-no-function', make: locker, oneCommand: true, oneSlot: true },
  ];
  for (const kind of CLIENTS) {
    for (const { name, setup, make, oneCommand, oneSlot } of cases) {
      test(`${kind}: ${name}`, async () => {
        const server = servers[setup];
        assert.ok(server);
        const module = setup === 'module';
        const clients = [];
        for (let i = 0; i < 4; i++) clients.push(await client(kind, server.port));
        const lockers = clients.map((c) => make(c.client));
        const prefix = oneSlot ? `{order-${kind}-${setup}}` : `order:${kind}:${setup}:${oneCommand}`;
        const [x, y] = [`${prefix}:x`, `${prefix}:y`];
        assert.equal(slotsOf([x, y]).size, oneSlot ? 1 : 2);
        const ROUNDS = 15;
        try {
          for (const l of lockers) await l.engine(); // engine detection before the count
          if (module) await server.admin(['CONFIG', 'RESETSTAT']);
          else await logEverything(server);
          const started = performance.now();
          let holding = 0;
          let most = 0;
          const run = async (locker: Locker | Redlock, keys: string[]): Promise<number> => {
            let done = 0;
            for (let i = 0; i < ROUNDS; i++) {
              const leases = await locker.acquireAll(keys, { wait: 2000 });
              holding++;
              most = Math.max(most, holding);
              assert.ok(leases.isValid());
              await sleep(3);
              holding--;
              await leases.release();
              done++;
            }
            return done;
          };
          // Two callers name {x, y}, two {y, x}, all at once, over and over.
          const done = await Promise.all(lockers.map((locker, i) => run(locker, i % 2 === 0 ? [x, y] : [y, x])));
          assert.deepEqual(done, lockers.map(() => ROUNDS));
          assert.equal(most, 1, 'never two holders of the set at once');
          const took = performance.now() - started;
          assert.ok(took < 20_000, `${lockers.length * ROUNDS} sets in ${took.toFixed(0)} ms`);
          let all: number;
          let each: number;
          if (module) {
            const calls = await commandCalls(server);
            [all, each] = [callsOf(calls, 'fencedlock.acquireall'), callsOf(calls, 'fencedlock.acquire')];
          } else {
            const calls = await loggedCalls(server);
            [all, each] = [callsTo(calls, 'fencedlock_acquireall').length, callsTo(calls, 'fencedlock_acquire').length];
          }
          if (oneCommand) {
            assert.ok(all >= lockers.length * ROUNDS, `${all} ACQUIREALLs`);
            assert.equal(each, 0, 'no key by key');
          } else {
            assert.equal(all, 0, 'key by key: no ACQUIREALL');
            assert.ok(each >= 2 * lockers.length * ROUNDS, `${each} ACQUIREs`);
          }
        } finally {
          if (!module) await server.admin(['CONFIG', 'SET', 'slowlog-log-slower-than', '10000']);
          for (const locker of lockers) await locker.close();
          for (const c of clients) await c.close();
        }
      });
    }
  }
});

describe('acquireAll on a Redis Cluster (module)', () => {
  const nodes = suiteCluster('module');

  async function totals(name: string): Promise<number> {
    let sum = 0;
    for (const n of nodes) sum += callsOf(await commandCalls(n), name);
    return sum;
  }

  const makers: Record<ClientKind, () => Promise<{ client: object; close(): Promise<void> }>> = {
    ioredis: async () => {
      const c = new Cluster(nodes.map((n) => ({ host: '127.0.0.1', port: n.port })));
      c.on('error', () => {});
      return { client: c, close: async () => void c.disconnect() };
    },
    'node-redis': async () => {
      const c = createCluster({ rootNodes: nodes.map((n) => ({ url: `redis://127.0.0.1:${n.port}` })) });
      c.on('error', () => {});
      await c.connect();
      return { client: c, close: async () => void c.destroy() };
    },
  };
  for (const kind of CLIENTS) {
    test(`${kind}: keys of one slot in one ACQUIREALL; keys of several slots key by key`, async () => {
      const c = await makers[kind]();
      const locker = new Locker(c.client, { ttl: 5000, timeout: 2000 });
      try {
        for (const n of nodes) await n.admin(['CONFIG', 'RESETSTAT']);
        const tagged = [`{set-${kind}}:ledger`, `{set-${kind}}:mail`, `{set-${kind}}:pdf`];
        const one = await locker.acquireAll(tagged);
        assert.equal(await totals('fencedlock.acquireall'), 1);
        assert.equal(await totals('fencedlock.acquire'), 0);
        fencesRise(one);
        for (const lease of one) assert.equal((await locker.status(lease.key))?.holders[0]?.fence, lease.fence);
        assert.equal(await one.release(), true);

        const spread = Array.from({ length: 6 }, (_, i) => `spread:${kind}:${i}`);
        const slots = new Set<string>();
        for (const key of spread) slots.add(String(await nodes[0]?.admin(['CLUSTER', 'KEYSLOT', key])));
        assert.ok(slots.size > 1);
        const many = await locker.acquireAll(spread);
        assert.equal(await totals('fencedlock.acquireall'), 1, 'no ACQUIREALL for keys of several slots');
        assert.equal(await totals('fencedlock.acquire'), spread.length);
        for (const lease of many) assert.equal((await locker.status(lease.key))?.holders[0]?.fence, lease.fence);
        assert.equal(await many.release(), true);
      } finally {
        await locker.close();
        await c.close();
      }
    });
  }
});
