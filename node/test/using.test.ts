/**
 * `using`: the lease is kept alive while the body runs, its signal is aborted within one
 * renewal interval of the key being deleted or taken over (or, with the server stopped, before
 * the validity ends), the body's error is rethrown and the lease is released at the end.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { LeaseLostError, Locker } from 'fencedlock';
import { CLIENTS, client, withLocker } from './support/clients.js';
import { describeOnEachSetup } from './support/suites.js';

const TTL = 900; // renewed every 300 ms
const INTERVAL = TTL / 3;
const SLACK = 250; // one request and the scheduler on this shared machine

describeOnEachSetup('using', (server) => {
  for (const kind of CLIENTS) {
    for (const fault of ['DEL', 'taken over'] as const) {
      test(`${kind}: the signal aborts within one renewal interval after ${fault}`, async () => {
        const c = await client(kind, server().port);
        const r = await client(kind, server().port);
        const locker = new Locker(c.client, { ttl: TTL, timeout: 250 });
        const rival = new Locker(r.client, { ttl: 10_000 });
        const key = `using:${kind}:${fault}`;
        let faultAt = 0;
        let renewedBefore = false;
        try {
          const outcome = await locker
            .using(key, {}, async (signal, lease) => {
              const granted = lease.validUntil;
              await sleep(INTERVAL * 1.5); // one renewal happens first
              renewedBefore = lease.validUntil > granted;
              assert.equal(signal.aborted, false);
              faultAt = performance.now();
              await server().admin(['DEL', key]);
              if (fault === 'taken over') assert.ok(await rival.acquire(key));
              await once(signal, 'abort');
              return performance.now() - faultAt;
            })
            .catch((e: unknown) => e);
          assert.ok(renewedBefore, 'the keep-alive renewed while the body ran');
          assert.ok(outcome instanceof LeaseLostError, `using rejects with the loss: ${String(outcome)}`);
          assert.equal(outcome.reason, 'Refused');
          const took = performance.now() - faultAt;
          assert.ok(took <= INTERVAL + SLACK, `aborted ${took.toFixed(0)} ms after the ${fault} (interval ${INTERVAL})`);
        } finally {
          await locker.close();
          await rival.close();
          await c.close();
          await r.close();
        }
      });
    }

    test(`${kind}: a stopped server aborts the signal before the validity ends`, async () => {
      const c = await client(kind, server().port);
      const locker = new Locker(c.client, { ttl: TTL, timeout: 250 });
      try {
        let validUntil = 0;
        let abortedAt = 0;
        const outcome = await locker
          .using(`stopped:${kind}`, {}, async (signal, lease) => {
            validUntil = lease.validUntil;
            server().signal('SIGSTOP');
            await once(signal, 'abort');
            abortedAt = performance.now();
            validUntil = Math.max(validUntil, lease.validUntil);
          })
          .catch((e: unknown) => e);
        server().signal('SIGCONT');
        assert.ok(outcome instanceof LeaseLostError, String(outcome));
        assert.ok(abortedAt <= validUntil + 20, `aborted at ${(abortedAt - validUntil).toFixed(0)} ms relative to the validity's end`);
      } finally {
        server().signal('SIGCONT');
        await locker.close();
        await c.close();
      }
    });

    test(`${kind}: a body awaiting an abortable API rejects with the LeaseLostError, its own error the cause`, async () => {
      const c = await client(kind, server().port);
      const locker = new Locker(c.client, { ttl: TTL, timeout: 250 });
      try {
        const key = `abortable:${kind}`;
        const outcome = await locker
          .using(key, {}, async (signal) => {
            await server().admin(['DEL', key]);
            await sleep(10_000, undefined, { signal }); // rejects with an AbortError at the loss
          })
          .catch((e: unknown) => e);
        assert.ok(outcome instanceof LeaseLostError, `rejects with the loss: ${String(outcome)}`);
        assert.equal(outcome.reason, 'Refused');
        assert.ok(outcome.cause instanceof Error && outcome.cause.name === 'AbortError', `the body's error is the cause: ${String(outcome.cause)}`);
        const boom = new Error('the body failed on its own');
        await assert.rejects(
          locker.using(`${key}:kept`, {}, async () => {
            throw boom;
          }),
          (e) => e === boom,
          'a lease still held: the body error as it is',
        );
      } finally {
        await locker.close();
        await c.close();
      }
    });

    test(`${kind}: the body's error is rethrown and the lease released`, async () => {
      await withLocker(kind, server().port, { ttl: 5000 }, async (locker) => {
        const key = `throws:${kind}`;
        let fence = 0n;
        const boom = new Error('boom');
        await assert.rejects(
          locker.using(key, {}, async (_signal, lease) => {
            fence = lease.fence;
            throw boom;
          }),
          (e) => e === boom,
        );
        const status = await locker.status(key);
        assert.equal(status?.fence, fence);
        assert.equal(status?.holders.length, 0, 'released at the end');
        const value = await locker.using(key, {}, async (signal, lease) => (signal.aborted ? -1n : lease.fence));
        assert.ok(value > fence, 'a body that returns gives its value');
      });
    });
  }
});
