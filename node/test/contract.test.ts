/**
 * The contract through both clients on every server the project supports: Redis 7.0, Redis
 * 7.4 and Valkey 9.1, each with the module, and without it as a managed service (the Functions
 * library, and the script form where FUNCTION is denied).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { ContendedError, InvalidArgumentError, Locker, Semaphore, ServerError, type Engine } from 'fencedlock';
import { CLIENTS, client } from './support/clients.js';
import { FLAVORS, type Setup } from './support/servers.js';
import { suiteServer } from './support/suites.js';

const SETUPS: readonly [Setup, Engine][] = [
  ['module', 'module'],
  ['managed', 'functions'],
  ['managed-no-function', 'script'],
];

for (const flavor of FLAVORS) {
  for (const [setup, engine] of SETUPS) {
    describe(`${flavor}, ${setup}`, () => {
      const server = suiteServer({ flavor, setup });

      for (const kind of CLIENTS) {
        test(`${kind}: grants, refusals, renewals, releases and typed errors on the ${engine} engine`, async () => {
          const a = await client(kind, server().port);
          const b = await client(kind, server().port);
          const locker = new Locker(a.client, { ttl: 3000, timeout: 2000 });
          const rival = new Locker(b.client, { ttl: 3000, timeout: 2000 });
          try {
            assert.equal(await locker.engine(), engine);
            const key = `contract:${kind}`;
            await locker.engine();
            const before = performance.now();
            const lease = await locker.acquire(key);
            const after = performance.now();
            assert.ok(lease, 'a free key is granted');
            assert.equal(typeof lease.fence, 'bigint');
            assert.ok(lease.fence > 0n);
            // Measured from before the request was sent, minus drift (3000 × 0.01 + 2 ms).
            const window = 3000 - 32;
            assert.ok(lease.validUntil >= before + window && lease.validUntil <= after + window, `validity ends ${(lease.validUntil - before).toFixed(1)} ms after the call began`);
            assert.equal(await rival.acquire(key), null, 'a held key is refused');
            const renewing = performance.now();
            await lease.renew();
            assert.ok(lease.validUntil >= renewing + window && lease.validUntil <= performance.now() + window, 'a renewal restarts it from before its request');
            const status = await locker.status(key);
            assert.equal(status?.fence, lease.fence);
            assert.equal(status?.holders.length, 1);
            assert.equal(await lease.release(), true);
            assert.equal(await lease.release(), false, 'a second release finds nothing');
            await assert.rejects(lease.renew(), { name: 'LeaseLostError' });
            const next = await rival.acquire(key);
            assert.ok(next && next.fence > lease.fence, 'the next grant has a higher fence');
            await assert.rejects(rival.using(key, { wait: 0 }, async () => assert.fail('never runs without the lease')), ContendedError);
            assert.equal(await next.release(), true);

            // Bad input: refused before anything is sent, nothing written.
            const keys = await server().admin(['DBSIZE']);
            for (const bad of ['', '   ', 'a\nb', 'tab\there', 'nul\u0000', 'del\u007f']) {
              await assert.rejects(locker.acquire(bad), InvalidArgumentError, JSON.stringify(bad));
            }
            for (const ttl of [0, -1, 1.5, Number.NaN, 2 ** 43]) {
              await assert.rejects(locker.acquire('fine', { ttl }), InvalidArgumentError, String(ttl));
            }
            await assert.rejects(locker.acquire('fine', { wait: -1 }), InvalidArgumentError);
            assert.throws(() => new Semaphore(locker, 'sem', 0), InvalidArgumentError);
            assert.throws(() => new Semaphore(locker, 'sem', 1025), InvalidArgumentError);
            assert.throws(() => new Semaphore(locker, 'sem', 2, { label: 'x'.repeat(257) }), InvalidArgumentError);
            assert.deepEqual(await server().admin(['DBSIZE']), keys, 'bad input wrote nothing');

            // A key of another type: the server's WRONGTYPE, final, never "unavailable".
            await server().admin(['SET', `plain:${kind}`, 'x']);
            const wrong = await locker.acquire(`plain:${kind}`).catch((e: unknown) => e);
            assert.ok(wrong instanceof ServerError, String(wrong));
            assert.equal(wrong.replyError, 'WrongType');
            assert.ok(!wrong.isRetryable() && !wrong.isUnavailable());
          } finally {
            await locker.close();
            await rival.close();
            await a.close();
            await b.close();
          }
        });

        test(`${kind}: semaphores on the ${engine} engine`, async () => {
          const a = await client(kind, server().port);
          const locker = new Locker(a.client, { ttl: 3000, timeout: 2000 });
          try {
            const key = `sem:${kind}`;
            const sem = new Semaphore(locker, key, 2, { label: 'worker' });
            const one = await sem.acquire();
            const two = await sem.acquire();
            assert.ok(one && two && two.fence > one.fence, 'each permit has its own, rising fence');
            assert.equal(await sem.acquire(), null, 'no third permit');
            const status = await sem.status();
            assert.equal(status?.permits, 2);
            assert.deepEqual(status?.holders.map((h) => h.fence), [one.fence, two.fence]);
            assert.equal(status?.holders[0]?.label?.toString(), 'worker');
            const mismatch = await new Semaphore(locker, key, 3).acquire().catch((e: unknown) => e);
            assert.ok(mismatch instanceof ServerError && mismatch.replyError === 'PermitsMismatch', String(mismatch));
            assert.ok(!mismatch.isRetryable() && !mismatch.isUnavailable());
            assert.equal(await one.release(), true);
            const three = await sem.acquire();
            assert.ok(three && three.fence > two.fence);
            await two.release();
            await three.release();
          } finally {
            await locker.close();
            await a.close();
          }
        });
      }
    });
  }
}
