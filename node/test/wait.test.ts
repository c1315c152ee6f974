/**
 * `wait`: waiters are granted in arrival order with rising fences, at the release (queued on
 * the module's server, or woken by the Functions library's wake-up list); a wait that runs out
 * or is aborted leaves nothing held.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import type { Lease } from 'fencedlock';
import { CLIENTS, withLocker } from './support/clients.js';
import { describeOnEachSetup } from './support/suites.js';

describeOnEachSetup('wait', (server) => {
  for (const kind of CLIENTS) {
    test(`${kind}: five waiters are granted in arrival order, each at the release`, async () => {
      const key = `order:${kind}`;
      await withLocker(kind, server().port, { ttl: 10_000, timeout: 1000 }, async (locker) => {
        const holder = await locker.acquire(key);
        assert.ok(holder);
        const granted: { waiter: number; fence: bigint; at: number }[] = [];
        let releasedAt = 0;
        const waiters: Promise<void>[] = [];
        for (let waiter = 0; waiter < 5; waiter++) {
          waiters.push(
            locker.acquire(key, { wait: 10_000 }).then(async (lease: Lease | null) => {
              assert.ok(lease, `waiter ${waiter} granted`);
              granted.push({ waiter, fence: lease.fence, at: performance.now() });
              await sleep(20);
              releasedAt = performance.now();
              await lease.release();
            }),
          );
          await sleep(60); // arrival order: each waiter queued before the next starts
        }
        releasedAt = performance.now();
        await holder.release();
        await Promise.all(waiters);
        assert.deepEqual(granted.map((g) => g.waiter), [0, 1, 2, 3, 4], 'arrival order');
        for (let i = 1; i < granted.length; i++) assert.ok((granted[i]?.fence ?? 0n) > (granted[i - 1]?.fence ?? 0n), 'rising fences');
        assert.ok(releasedAt > 0);
        const last = granted[granted.length - 1];
        assert.ok(last && last.at - (granted[0]?.at ?? 0) < 5 * 20 + 400, `handed on at each release, not at a poll: ${granted.map((g) => (g.at - (granted[0]?.at ?? 0)).toFixed(0)).join(', ')} ms`);
      });
    });

    test(`${kind}: a wait that runs out or is aborted holds nothing`, async () => {
      const key = `giveup:${kind}`;
      await withLocker(kind, server().port, { ttl: 10_000, timeout: 1000 }, async (locker) => {
        const holder = await locker.acquire(key);
        assert.ok(holder);
        const started = performance.now();
        assert.equal(await locker.acquire(key, { wait: 300 }), null);
        const took = performance.now() - started;
        assert.ok(took >= 290 && took < 1000, `gave up after ${took.toFixed(0)} ms`);
        const abort = new AbortController();
        const aborted = locker.acquire(key, { wait: 5000, signal: abort.signal });
        await sleep(100);
        abort.abort();
        await assert.rejects(aborted, { name: 'AbortError' });
        await holder.release();
        // The aborted waiter's connection closes while the release travels on another: a
        // handoff in between is ended by the second release, one timeout (1 s) later.
        await sleep(1200);
        const status = await locker.status(key);
        assert.equal(status?.holders.length, 0, 'nobody holds it after the release: the givers-up left nothing');
      });
    });
  }
});
