/**
 * Fenced read-write locks through both clients: readers together with their own fences, a
 * writer alone with a fence above every reader's, `STATUS` of a key held by readers, an
 * upgrade refused, a lost write lease never downgraded (the module and the Functions library);
 * the downgrade keeping the fence and letting a waiting reader in, and a reader that comes
 * after a waiting writer queued behind it (the module's queue).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { ContendedError, InvalidArgumentError, LeaseLostError, Locker, ReadWriteLock, Redlock, SHARED_PERMITS, Semaphore, ServerError, type Lease } from 'fencedlock';
import { decodeStatus, heldForMs } from '../src/replies.js';
import { CLIENTS, client, withLocker, type Client } from './support/clients.js';
import { REPO, TestServer } from './support/servers.js';
import { describeOnEachSetup, suiteServer } from './support/suites.js';

/** Clients queued in the module now (`INFO fencedlock`). */
async function waiters(server: TestServer): Promise<number> {
  const info = String(await server.admin(['INFO', 'fencedlock']));
  const found = /fencedlock_waiters:(\d+)/.exec(info);
  assert.ok(found?.[1], 'INFO fencedlock shows fencedlock_waiters');
  return Number(found[1]);
}

async function until(what: string, check: () => Promise<boolean>, limitMs = 5000): Promise<void> {
  const deadline = performance.now() + limitMs;
  while (!(await check())) {
    assert.ok(performance.now() < deadline, `${what} within ${limitMs} ms`);
    await sleep(5);
  }
}

/** Whether `promise` has settled (it is given a moment to). */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  return Promise.race([promise.then(() => true, () => true), sleep(20).then(() => false)]);
}

test('STATUS of a key held by readers decodes with permits 0; a waiter naps until the first reader ends', () => {
  const label = Buffer.from('r-2');
  const readers = decodeStatus([9n, 3n, 0n, [[4n, 10n, null], [5n, 3n, label], [9n, 1n, null]]]);
  assert.deepEqual(readers, {
    fence: 9n,
    permits: SHARED_PERMITS,
    shared: true,
    holders: [
      { fence: 4n, remainingMs: 10, label: null },
      { fence: 5n, remainingMs: 3, label },
      { fence: 9n, remainingMs: 1, label: null },
    ],
  });
  assert.deepEqual(decodeStatus([9n, 0n, 0n, []]), { fence: 9n, permits: 0, shared: true, holders: [] });
  const full = Array.from({ length: 1024 }, (_, i) => [BigInt(i + 1), 5n, null]);
  assert.equal(decodeStatus([2000n, 1024n, 0n, full])?.holders.length, 1024, 'up to MAX_PERMITS readers');
  assert.equal(decodeStatus([9n, 1n, 3n, [[4n, 100n, null]]])?.shared, false);
  assert.equal(decodeStatus([7n, 1n, 250n])?.shared, false, 'a write lease is a mutex');
  for (const broken of [
    [2000n, 1025n, 0n, [...full, [1025n, 5n, null]]],
    [9n, 1n, 0n, []],
    [9n, 0n, 0n, [[4n, 1n, null]]],
    [9n, 0n, -1n, []],
    [9n, 0n, 1025n, []],
  ]) {
    assert.throws(() => decodeStatus(broken), { name: 'BadReplyError' }, JSON.stringify(broken, (_, v: unknown) => (typeof v === 'bigint' ? String(v) : v)));
  }
  // Readers admit more readers but no writer: a waiter naps until the first reader's lease ends.
  assert.equal(heldForMs(readers), 1);
  assert.equal(heldForMs(decodeStatus([9n, 1n, 3n, [[4n, 100n, null]]])), 0, 'a semaphore with a free permit');
  assert.equal(heldForMs(decodeStatus([9n, 0n, 0n, []])), 0);
});

describeOnEachSetup('read-write locks', (server, setup) => {
  for (const kind of CLIENTS) {
    const open = async (): Promise<[Client, Locker]> => {
      const c = await client(kind, server().port);
      return [c, new Locker(c.client, { ttl: 10_000, timeout: 2000 })];
    };

    test(`${kind}: readers hold together, a writer waits for them and gets a higher fence`, async () => {
      const [c, locker] = await open();
      try {
        assert.equal(await locker.engine(), setup === 'module' ? 'module' : 'functions');
        const lock = new ReadWriteLock(locker, `rw:modes:${kind}`, { label: 'reader' });
        const first = await lock.tryRead();
        const second = await lock.tryRead();
        assert.ok(first && second, 'readers hold the key together');
        assert.ok(second.fence > first.fence, "each reader its own fence, from the key's one sequence");
        assert.equal(await lock.tryWrite(), null, 'no writer while anyone reads');
        const status = await lock.status();
        assert.equal(status?.shared, true);
        assert.equal(status?.permits, SHARED_PERMITS);
        assert.deepEqual(status?.holders.map((h) => h.fence), [first.fence, second.fence]);
        assert.deepEqual(status?.holders.map((h) => h.label?.toString()), ['reader', 'reader']);
        const writer = lock.write({ wait: 10_000 });
        await sleep(300);
        assert.equal(await settled(writer), false, 'the writer waits while readers hold the key');
        assert.equal(await first.release(), true);
        await sleep(100);
        assert.equal(await settled(writer), false, 'one reader still holds the key');
        assert.equal(await second.release(), true);
        const written = await writer;
        assert.ok(written && written.fence > second.fence, "a writer's fence is above every reader's");
        assert.equal(await lock.tryRead(), null, 'a writer is alone');
        assert.equal(await locker.acquire(lock.key), null, "the write lease is locker.acquire's lease");
        const writing = await lock.status();
        assert.equal(writing?.shared, false);
        assert.equal(writing?.permits, 1);
        assert.deepEqual(writing?.holders.map((h) => h.fence), [written.fence]);
        const mismatch = await new Semaphore(locker, lock.key, 3).acquire().catch((e: unknown) => e);
        assert.ok(mismatch instanceof ServerError && mismatch.replyError === 'PermitsMismatch', String(mismatch));
        assert.equal(await written.release(), true);
        const reader = await lock.tryRead();
        assert.ok(reader && reader.fence > written.fence);
        const held = await new Semaphore(locker, lock.key, 3).acquire().catch((e: unknown) => e);
        assert.ok(held instanceof ServerError && held.replyError === 'PermitsMismatch', 'a key held by readers refuses a semaphore');
        await reader.release();
        assert.equal(await lock.usingRead({}, async (_signal, lease) => lease.fence > reader.fence), true);
        await assert.rejects(lock.usingRead({ wait: 0 }, () => lock.usingWrite({ wait: 100 }, async () => assert.fail('never runs without the lease'))), ContendedError);
      } finally {
        await locker.close();
        await c.close();
      }
    });

    test(`${kind}: the readers waiting for a writer enter together when it leaves`, async () => {
      // On the Functions engine a release wakes one reader, and each reader granted after a
      // wake-up passes it on: none waits out its nap (timed to the writer's 10 s lease).
      const [c, locker] = await open();
      try {
        const lock = new ReadWriteLock(locker, `rw:cascade:${kind}`);
        const written = await lock.write();
        assert.ok(written);
        const readers = [0, 1, 2].map(() => lock.read({ wait: 8000 }));
        await sleep(500);
        for (const reader of readers) assert.equal(await settled(reader), false);
        const started = performance.now();
        assert.equal(await written.release(), true);
        const leases = await Promise.all(readers);
        const took = performance.now() - started;
        assert.ok(took < 2000, `the readers entered ${took.toFixed(0)} ms after the writer left`);
        for (const lease of leases) assert.ok(lease && lease.fence > written.fence);
        assert.equal((await lock.status())?.holders.length, 3);
      } finally {
        await locker.close();
        await c.close();
      }
    });

    test(`${kind}: an upgrade is refused with its own error kind and the read lease stays`, async () => {
      const [c, locker] = await open();
      try {
        const key = `rw:up:${kind}`;
        const server0 = locker.core.servers[0];
        assert.ok(server0);
        const token = 'a-reader-token';
        const fence = await server0.acquire({ key, token, ttlMs: 10_000, shared: true });
        assert.ok(fence);
        const refused = await server0.acquire({ key, token, ttlMs: 10_000 }).catch((e: unknown) => e);
        assert.ok(refused instanceof ServerError, String(refused));
        assert.equal(refused.replyError, 'UpgradeRefused');
        assert.ok(!refused.isRetryable() && !refused.isUnavailable() && !refused.isBadRequest());
        assert.ok(!refused.message.includes(token), 'the token never shows');
        assert.equal(await server0.acquire({ key, token, ttlMs: 10_000, shared: true }), fence, "the reader's own SHARED re-enters");
        const status = await new ReadWriteLock(locker, key).status();
        assert.equal(status?.shared, true);
        assert.deepEqual(status?.holders.map((h) => h.fence), [fence]);
      } finally {
        await locker.close();
        await c.close();
      }
    });

    test(`${kind}: a write lease that ended is not downgraded`, async () => {
      const [c, locker] = await open();
      try {
        const lock = new ReadWriteLock(locker, `rw:gone:${kind}`);
        const lease = await lock.write();
        assert.ok(lease);
        // The key is deleted behind the holder's back: the server would grant a new read lease.
        await server().admin(['DEL', lock.key]);
        await assert.rejects(lock.downgrade(lease), LeaseLostError);
        assert.equal(lease.isValid(), false, 'the lease is over');
        const status = await lock.status();
        assert.deepEqual(status?.holders, [], 'the new read lease was given back');
        assert.ok(status && status.fence > lease.fence);
        await assert.rejects(lock.downgrade(lease), LeaseLostError, 'refused locally, nothing sent');
        // Past its validity: refused locally.
        const brief = await lock.write({ ttl: 200 });
        assert.ok(brief);
        await sleep(250);
        await assert.rejects(lock.downgrade(brief), LeaseLostError);
        const taken = await lock.tryWrite();
        assert.ok(taken && taken.fence > brief.fence, 'nothing was re-granted to the ended lease');
        // A lease of another key, or of another locker, is refused before anything is sent.
        const other = await new ReadWriteLock(locker, `rw:other:${kind}`).write();
        assert.ok(other);
        await assert.rejects(lock.downgrade(other), InvalidArgumentError);
        const [c2, locker2] = await open();
        try {
          await assert.rejects(new ReadWriteLock(locker2, lock.key).downgrade(taken), InvalidArgumentError);
        } finally {
          await locker2.close();
          await c2.close();
        }
        assert.equal((await locker.status(other.key))?.shared, false, 'still a write lease');
        const redlock = new Redlock([c.client]);
        assert.throws(() => new ReadWriteLock(redlock as unknown as Locker, 'k'), InvalidArgumentError);
        await redlock.close();
        assert.throws(() => new ReadWriteLock(locker, 'k', { label: '' }), InvalidArgumentError);
        assert.throws(() => new ReadWriteLock(locker, 'bad\nkey'), InvalidArgumentError);
      } finally {
        await locker.close();
        await c.close();
      }
    });
  }
});

describe('read-write locks in the module queue', () => {
  const server = suiteServer({ setup: 'module' });

  for (const kind of CLIENTS) {
    test(`${kind}: a downgrade keeps the fence and lets the waiting reader in`, async () => {
      await withLocker(kind, server().port, { ttl: 10_000, timeout: 2000 }, async (locker) => {
        const lock = new ReadWriteLock(locker, `rw:down:${kind}`, { label: 'exporter' });
        const lease = await lock.write();
        assert.ok(lease);
        const fence = lease.fence;
        const reader = lock.read({ wait: 10_000 });
        await until('the reader to queue', async () => (await waiters(server())) === 1);
        await sleep(1000);
        const before = performance.now();
        await lock.downgrade(lease);
        assert.equal(lease.fence, fence, 'the same fence');
        assert.ok(lease.validUntil > before + 9800, 'a fresh ttl, measured from before the request');
        const read: Lease | null = await reader;
        assert.ok(read && read.fence > fence, 'the waiting reader came in with it');
        const status = await lock.status();
        assert.equal(status?.shared, true);
        assert.deepEqual(status?.holders.map((h) => h.fence), [fence, read.fence]);
        assert.equal(status?.holders[0]?.label?.toString(), 'exporter');
        assert.equal(await lock.tryWrite(), null, 'no writer while the downgraded lease reads');
        await lease.renew();
        assert.equal(await lease.release(), true);
        assert.equal(await read.release(), true);
        // Inside usingWrite: the downgraded lease is kept alive and released at the end.
        const fences = await lock.usingWrite({}, async (_signal, writing) => {
          await lock.downgrade(writing);
          return [writing.fence, (await lock.tryRead())?.fence];
        });
        assert.ok(fences[1] !== undefined && fences[0] !== undefined && fences[1] > fences[0], 'a reader joins the downgraded lease');
      });
    });

    test(`${kind}: the package page's read-write example runs`, async () => {
      const page = readFileSync(join(REPO, 'node/README.md'), 'utf8');
      const section = page.slice(page.indexOf('## Read-write locks'), page.indexOf('## Leader election'));
      const blocks = [...section.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
      assert.equal(blocks.length, 1, "the section's example changed: update this test");
      const body = (blocks[0] ?? '').replace(/^import .*$/m, '');
      await withLocker(kind, server().port, { ttl: 10_000, timeout: 2000 }, async (locker) => {
        const reads: bigint[] = [];
        const writes: bigint[] = [];
        const logged: unknown[] = [];
        const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor as new (...args: string[]) => (...values: unknown[]) => Promise<void>;
        const run = new AsyncFunction('locker', 'ReadWriteLock', 'readPrices', 'writePrices', 'console', body);
        await run(locker, ReadWriteLock, async (fence: bigint) => void reads.push(fence), async (fence: bigint) => void writes.push(fence), { log: (v: unknown) => logged.push(v) });
        assert.equal(reads.length, 2);
        assert.equal(writes.length, 1);
        assert.ok((writes[0] ?? 0n) > (reads[0] ?? 0n) && reads[1] === writes[0], 'the downgraded lease reads with the write fence');
        const status = logged[0] as { shared: boolean; holders: unknown[] };
        assert.ok(status.shared && status.holders.length === 0, 'all released, the key last held by a read lease');
      });
    });

    test(`${kind}: a reader that comes after a waiting writer waits behind it`, async () => {
      await withLocker(kind, server().port, { ttl: 10_000, timeout: 2000 }, async (locker) => {
        const lock = new ReadWriteLock(locker, `rw:queue:${kind}`);
        const first = await lock.tryRead();
        assert.ok(first);
        const writer = lock.write({ wait: 10_000 });
        await until('the writer to queue', async () => (await waiters(server())) === 1);
        assert.equal(await lock.tryRead(), null, 'a fresh reader does not pass the waiting writer');
        const late = lock.read({ wait: 10_000 });
        await until('the late reader to queue behind the writer', async () => (await waiters(server())) === 2);
        assert.equal(await first.release(), true);
        const written = await writer;
        assert.ok(written && written.fence > first.fence);
        await sleep(200);
        assert.equal(await settled(late), false, 'the late reader waits for the writer');
        assert.equal(await written.release(), true);
        const read = await late;
        assert.ok(read && read.fence > written.fence);
        await read.release();
      });
    });
  }
});
