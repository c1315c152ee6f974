/**
 * Arguments checked before anything is sent, with messages that say what was wrong: a ttl
 * below the minimum (seconds written for milliseconds), of another type (named in the
 * message), or above what the server's engine takes (the Functions library's one day, which
 * it cannot be configured past); and one class identity for the ESM and CommonJS builds.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';

import * as esm from 'fencedlock';
import { FencedLockError, InvalidArgumentError, LeaseLostError, Locker, ServerError } from 'fencedlock';
import { MIN_TTL_MS } from '../src/options.js';
import { CLIENTS, client, withLocker } from './support/clients.js';
import { TestServer } from './support/servers.js';

const DAY = 86_400_000;

describe('ttl', () => {
  let module: TestServer;
  let managed: TestServer;
  before(async () => {
    module = await TestServer.start({ setup: 'module' });
    managed = await TestServer.start({ setup: 'managed' });
  });
  after(async () => {
    await module.stop();
    await managed.stop();
  });

  for (const kind of CLIENTS) {
    test(`${kind}: a ttl below ${MIN_TTL_MS} ms, or not a number, is refused naming ms and the type`, async () => {
      const c = await client(kind, module.port);
      const locker = new Locker(c.client);
      try {
        for (const ttl of [30, 1, MIN_TTL_MS - 1]) {
          const err = await locker.acquire('ttl:short', { ttl }).catch((e: unknown) => e);
          assert.ok(err instanceof InvalidArgumentError, `ttl ${ttl}: ${String(err)}`);
          assert.ok(err.message.includes('milliseconds'), err.message);
        }
        assert.throws(() => new Locker(c.client, { ttl: 30 }), InvalidArgumentError);
        for (const [ttl, type] of [[1000n, 'bigint'], ['1000', 'string']] as const) {
          const err = await locker.acquire('ttl:type', { ttl: ttl as unknown as number }).catch((e: unknown) => e);
          assert.ok(err instanceof InvalidArgumentError, String(err));
          assert.ok(err.message.includes(`(${type})`), `the message names the type: ${err.message}`);
        }
        assert.equal(String(await module.admin(['EXISTS', 'ttl:short', 'ttl:type'])), '0', 'nothing was sent');
        const lease = await locker.acquire('ttl:least', { ttl: MIN_TTL_MS });
        assert.ok(lease, 'the least ttl is granted');
        await lease.release();
      } finally {
        await locker.close();
        await c.close();
      }
    });

    test(`${kind}: a ttl above a day is refused before it reaches a server without the module`, async () => {
      await withLocker(kind, managed.port, undefined, async (locker) => {
        const err = await locker.acquire('ttl:long', { ttl: 10 * DAY }).catch((e: unknown) => e);
        assert.ok(err instanceof InvalidArgumentError, `refused by the client: ${String(err)}`);
        assert.equal(String(await managed.admin(['EXISTS', 'ttl:long'])), '0');
        const day = await locker.acquire('ttl:day', { ttl: DAY });
        assert.ok(day, 'a day is the library\'s limit, granted');
        await day.release();
      });
      // The module's limit is its config (a day by default, up to 2^42 ms): the server answers.
      const m = await client(kind, module.port);
      const onModule = new Locker(m.client);
      try {
        const err = await onModule.acquire('ttl:long', { ttl: 10 * DAY }).catch((e: unknown) => e);
        assert.ok(err instanceof ServerError && err.isBadRequest() && !err.isUnavailable(), String(err));
      } finally {
        await onModule.close();
        await m.close();
      }
    });
  }
});

test('the ESM and CommonJS builds share one class identity', async () => {
  const cjs = createRequire(import.meta.url)('fencedlock') as typeof esm;
  assert.notEqual(cjs.Locker, esm.Locker, 'two builds, two class objects');
  const server = await TestServer.start({ setup: 'module' });
  const c = await client('ioredis', server.port);
  const fromCjs = new cjs.Locker(c.client);
  try {
    assert.ok(fromCjs instanceof esm.Locker, 'a CommonJS Locker is an ESM Locker');
    assert.ok(new esm.Locker(c.client) instanceof cjs.Locker, 'and the reverse');
    assert.ok(!(fromCjs instanceof esm.Redlock), 'a Locker is no Redlock');
    const lease = await fromCjs.acquire('identity');
    assert.ok(lease instanceof esm.Lease);
    const err = await fromCjs.acquire('identity', { ttl: 5 }).catch((e: unknown) => e);
    assert.ok(err instanceof InvalidArgumentError && err instanceof FencedLockError, 'a CommonJS error is the ESM class');
    assert.ok(!(err instanceof LeaseLostError) && !(err instanceof ServerError));
    assert.ok(new esm.LeaseLostError('k', 'Expired') instanceof cjs.LeaseLostError);
    assert.ok(new esm.UnavailableError('n', 'TimedOut', 'x') instanceof cjs.ServerError, 'subclasses too');
    assert.ok(!(new Error('plain') instanceof cjs.FencedLockError));
    await lease?.release();
  } finally {
    await fromCjs.close();
    await c.close();
    await server.stop();
  }
});
