/**
 * An attempt that got no answer may have been granted unheard, so the locker gives its token
 * back: at once, and (after a waiting request, whose connection is closed while the release
 * travels on another) again one timeout later. The retry that follows must never be the
 * target of those releases: a lease handed out after a retry is still held, with its fence,
 * once every release of the attempts before it has run. A server stopped with SIGSTOP makes
 * the first attempts time out; it resumes while the retry is under way. One server (either
 * engine: the module's queue, or the Functions library's wake-ups), one key or a set (one
 * ACQUIREALL, the library's for keys of one slot, or key by key), polling, and Redlock's
 * waiting on the key's designated master.
 * Both clients throughout.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Locker, Redlock, type Lease } from 'fencedlock';
import { ranking } from '../src/ranking.js';
import { CLIENTS, client, type Client, type ClientKind } from './support/clients.js';
import { TestServer } from './support/servers.js';
import { describeOnEachSetup, suiteServers } from './support/suites.js';

/** The per-request timeout: a request without an answer fails after it, and the late release follows one more. */
const TIMEOUT = 300;

/** Past every release of an earlier attempt: the last is sent one timeout after that attempt failed, and bounded by another. */
const PAST_THE_RELEASES = 2 * TIMEOUT + 300;

async function until(what: string, check: () => Promise<boolean>, limitMs = 5000): Promise<void> {
  const deadline = performance.now() + limitMs;
  while (!(await check())) {
    assert.ok(performance.now() < deadline, `${what} within ${limitMs} ms`);
    await sleep(5);
  }
}

/** The module's queue length on `server` (`INFO fencedlock`). */
async function waiters(server: TestServer): Promise<number> {
  const info = String(await server.admin(['INFO', 'fencedlock']));
  const found = /fencedlock_waiters:(\d+)/.exec(info);
  assert.ok(found?.[1], 'INFO fencedlock shows fencedlock_waiters');
  return Number(found[1]);
}

/** Checks that `lease` is still the one holder of its key, by STATUS, a renewal and another locker's refusal. */
async function stillHeld(lease: Lease, other: Locker): Promise<void> {
  const status = await other.status(lease.key);
  assert.deepEqual(
    status?.holders.map((h) => h.fence),
    [lease.fence],
    `${lease.key}: still held by the lease handed out (fence ${lease.fence}) after the earlier attempts' releases ran; STATUS shows ${status ? `fence ${status.fence}, holders [${status.holders.map((h) => h.fence).join(', ')}]` : 'no lock state'}`,
  );
  await lease.renew();
  assert.equal(await other.acquire(lease.key, { wait: 0 }), null, `${lease.key}: another locker is refused`);
}

/** `take()` sent while `server` is stopped, and the server resumed 1.5 timeouts later: its first attempt goes unanswered. */
async function acrossAPause<T>(server: TestServer, take: () => Promise<T>): Promise<T> {
  server.signal('SIGSTOP');
  const taking = take();
  await sleep(TIMEOUT * 1.5);
  server.signal('SIGCONT');
  return taking;
}

describeOnEachSetup('a retry after an unanswered attempt keeps its lease', (server, setup) => {
  /** A locker with the short timeout and another (the rival), each on a client of its own, engines known and shared connections open. */
  async function lockers(kind: ClientKind, options: { maxBlocking?: number } = {}): Promise<{ locker: Locker; other: Locker; close(): Promise<void> }> {
    const c = await client(kind, server().port);
    const o = await client(kind, server().port);
    const locker = new Locker(c.client, { ttl: 10_000, timeout: TIMEOUT, ...options });
    const other = new Locker(o.client, { ttl: 10_000, timeout: 2000 });
    // Only the requests the test is about meet the stopped server: the engine is known, the
    // shared connections are open (and, for sets, ACQUIREALL was asked for) before the stop.
    await (await locker.acquireAll([`warm:${kind}:${Math.random()}`])).release();
    await other.status('warm');
    return {
      locker,
      other,
      close: async () => {
        server().signal('SIGCONT');
        await locker.close();
        await other.close();
        await c.close();
        await o.close();
      },
    };
  }

  for (const kind of CLIENTS) {
    test(`${kind}: a waiting request unanswered, then the retry granted: the lease outlives the late releases`, async () => {
      const { locker, other, close } = await lockers(kind);
      const key = `unanswered:wait:${setup}:${kind}`;
      try {
        server().signal('SIGSTOP');
        const started = performance.now();
        const taking = locker.acquire(key, { wait: 5000 });
        // The first waiting request (its connection's handshake) gets no answer: it fails at
        // TIMEOUT, and its token is released at once and again one TIMEOUT later. The retry
        // is under way when the server resumes, and is granted well before that second release.
        await sleep(TIMEOUT * 1.5);
        server().signal('SIGCONT');
        const lease = await taking;
        assert.ok(lease, 'granted once the server answers');
        assert.ok(performance.now() - started >= TIMEOUT * 1.5, 'granted after the resume');
        await sleep(PAST_THE_RELEASES);
        await stillHeld(lease, other);
        assert.equal(await lease.release(), true);
      } finally {
        await close();
      }
    });

    test(`${kind}: polling (maxBlocking 0), an attempt unanswered: the retry's lease outlives the release`, async () => {
      const { locker, other, close } = await lockers(kind, { maxBlocking: 0 });
      const key = `unanswered:poll:${setup}:${kind}`;
      try {
        const lease = await acrossAPause(server(), () => locker.acquire(key, { wait: 5000 }));
        assert.ok(lease, 'granted once the server answers');
        await sleep(PAST_THE_RELEASES);
        await stillHeld(lease, other);
        assert.equal(await lease.release(), true);
      } finally {
        await close();
      }
    });

    // On the module one ACQUIREALL whatever the slots; on the library keys of one slot are
    // one fencedlock_acquireall, keys of several key by key.
    const sets: [string, string][] = [['', `unanswered:all:${setup}:${kind}`]];
    if (setup === 'managed') sets.push([' (keys of one slot)', `{unanswered-all-${setup}-${kind}}`]);
    for (const [which, prefix] of sets) {
      test(`${kind}: acquireAll with attempts unanswered${which}: every lease outlives the late releases`, async () => {
        const { locker, other, close } = await lockers(kind);
        const keys = [`${prefix}:b`, `${prefix}:a`];
        try {
          const leases = await acrossAPause(server(), () => locker.acquireAll(keys, { wait: 5000 }));
          assert.equal(leases.size, 2);
          await sleep(PAST_THE_RELEASES);
          for (const lease of leases) await stillHeld(lease, other);
          assert.equal(await leases.release(), true);
        } finally {
          await close();
        }
      });
    }
  }
});

async function redlockOver(kind: ClientKind, masters: readonly TestServer[], timeout: number): Promise<{ redlock: Redlock; close(): Promise<void> }> {
  const clients: Client[] = [];
  for (const master of masters) clients.push(await client(kind, master.port));
  const redlock = new Redlock(clients.map((c) => c.client), { ttl: 10_000, timeout });
  // Engines known and shared connections open on every master before any is stopped.
  const warm = await redlock.acquire(`warm:${kind}:${Math.random()}`);
  assert.ok(warm);
  await warm.release();
  return {
    redlock,
    close: async () => {
      await redlock.close();
      for (const c of clients) await c.close();
    },
  };
}

/** The STATUS of `key` on one master, as sent: [fence, held, pttl]. */
async function masterStatus(master: TestServer, key: string): Promise<string> {
  const reply = await master.admin(['FENCEDLOCK.STATUS', key]);
  return Array.isArray(reply) ? `fence ${String(reply[0])}, held ${String(reply[1])}` : `no lock state (${String(reply)})`;
}

for (const kind of CLIENTS) {
  describe(`Redlock: a waiting request unanswered on the designated master (${kind})`, () => {
    const masters = suiteServers(3, { setup: 'module' });

    test('the master it moved on from, granted in the round that follows, still holds the lease after the late releases', async () => {
      const holderSide = await redlockOver(kind, masters, 2000);
      const waiterSide = await redlockOver(kind, masters, TIMEOUT);
      const rivalSide = await redlockOver(kind, masters, TIMEOUT);
      const key = `rl:unanswered:${kind}`;
      const order = ranking(key, waiterSide.redlock.core.servers.map((s) => s.name));
      const [designated, next, third] = order.map((i) => masters[i]);
      assert.ok(designated && next && third);
      try {
        const holder = await holderSide.redlock.acquire(key);
        assert.ok(holder);
        const taking = waiterSide.redlock.acquire(key, { wait: 8000 });
        await until('the waiter to queue on the designated master', async () => (await waiters(designated)) === 1);
        // The designated master stops answering: the waiter's watchdog ping goes unanswered,
        // it abandons the request there (releasing its token there at once and one timeout
        // later) and queues on the next master in the ranking.
        designated.signal('SIGSTOP');
        await until('the waiter to queue on the next master', async () => (await waiters(next)) === 1, 5000);
        // The lease must then stand on the designated master and the next: the third is stopped.
        third.signal('SIGSTOP');
        designated.signal('SIGCONT');
        assert.equal(await holder.release(), true);
        const lease = await taking;
        assert.ok(lease, 'granted at the release');
        await sleep(PAST_THE_RELEASES);
        for (const master of [designated, next]) {
          const status = await masterStatus(master, key);
          assert.equal(status, `fence ${lease.fence}, held 1`, `master ${master.port} still holds the lease (the third is stopped: it stands on two of three)`);
        }
        await lease.renew();
        assert.equal(await rivalSide.redlock.acquire(key), null, 'another Redlock is refused');
        third.signal('SIGCONT');
        assert.equal(await lease.release(), true);
      } finally {
        for (const m of masters) m.signal('SIGCONT');
        await holderSide.close();
        await waiterSide.close();
        await rivalSide.close();
      }
    });
  });
}
