/**
 * The client libraries users install: the oldest and the newest version of every range
 * `peerDependencies` declares (ioredis 5.3 to 6.x, node-redis 5.0 to 6.x), on both engines:
 * a lease, a refusal, a renewal, a release, a wait handed over at the release, a loss signalled
 * after `DEL`, and a server restarted without the module (`NoModule`, neither held nor an
 * outage). Versions the ranges leave out are refused at construction, naming the supported
 * ones, never reported as an outage; a reply of a shape the package does not read is a
 * `BadReplyError`, never an outage.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { describe, test } from 'node:test';

import { BadReplyError, InvalidArgumentError, LeaseLostError, Locker, ServerError } from 'fencedlock';
import { UnexpectedReply } from '../src/connection.js';
import { Locker as SourceLocker } from '../src/locker.js';
import { IOREDIS_4, NODE_REDIS_4, VERSIONS, clientOf } from './support/clients.js';
import { TestServer, type Setup } from './support/servers.js';
import { suiteServer } from './support/suites.js';

const ENGINES: readonly [Setup, 'module' | 'functions'][] = [
  ['module', 'module'],
  ['managed', 'functions'],
];

for (const [setup, engine] of ENGINES) {
  describe(`the supported client versions (${setup})`, () => {
    const server = suiteServer({ setup });

    for (const version of VERSIONS) {
      test(`${version.label} (${version.pkg}): lease, refusal, renewal, release, wait, loss`, async () => {
        const a = await clientOf(version, server().port);
        const b = await clientOf(version, server().port);
        const locker = new Locker(a.client, { ttl: 900, timeout: 500 });
        const rival = new Locker(b.client, { ttl: 900, timeout: 500 });
        const key = `versions:${version.pkg}`;
        try {
          assert.equal(await locker.engine(), engine);
          const lease = await locker.acquire(key);
          assert.ok(lease, 'granted');
          assert.equal(typeof lease.fence, 'bigint');
          assert.equal(await rival.acquire(key), null, 'held');
          await lease.renew();
          const waiting = rival.acquire(key, { wait: 5000 });
          await new Promise((r) => setTimeout(r, 50));
          assert.equal(await lease.release(), true);
          const next = await waiting;
          assert.ok(next && next.fence > lease.fence, 'handed over at the release');
          assert.equal(await next.release(), true);
          const outcome = await locker
            .using(key, {}, async (signal) => {
              await server().admin(['DEL', key]);
              await once(signal, 'abort');
            })
            .catch((e: unknown) => e);
          assert.ok(outcome instanceof LeaseLostError, String(outcome));
        } finally {
          await locker.close();
          await rival.close();
          await a.close();
          await b.close();
        }
      });
    }
  });
}

describe('a module server restarted without the module', () => {
  for (const version of VERSIONS) {
    test(`${version.label}: NoModule, neither held nor an outage`, async () => {
      const server = await TestServer.start({ setup: 'module' });
      const c = await clientOf(version, server.port);
      const locker = new Locker(c.client, { timeout: 500 });
      try {
        const lease = await locker.acquire('nomodule:warm');
        assert.ok(lease);
        await lease.release();
        await server.restartWithoutModule();
        let err: unknown;
        for (let i = 0; i < 50; i++) {
          err = await locker.acquire('nomodule').catch((e: unknown) => e);
          if (err instanceof ServerError && err.kind === 'NoModule') break;
          await new Promise((r) => setTimeout(r, 100)); // the client reconnecting
        }
        assert.ok(err instanceof ServerError, String(err));
        assert.equal(err.kind, 'NoModule');
        assert.ok(!err.isUnavailable());
      } finally {
        await locker.close();
        await c.close();
        await server.stop();
      }
    });
  }
});

test('client versions the ranges leave out are refused at construction, never an outage', () => {
  const old = NODE_REDIS_4.createClient({ socket: { host: '127.0.0.1', port: 1 } });
  assert.throws(() => new Locker(old), InvalidArgumentError, 'node-redis 4');
  assert.throws(() => new Locker(new IOREDIS_4({ lazyConnect: true, port: 1 })), InvalidArgumentError, 'ioredis 4');
  assert.throws(() => new Locker({}), InvalidArgumentError, 'not a client');
});

test('a reply of a shape the package does not read is a BadReplyError, never an outage', async () => {
  const server = await TestServer.start({ setup: 'module' });
  const newest = VERSIONS[VERSIONS.length - 1];
  assert.ok(newest);
  const c = await clientOf(newest, server.port);
  // The adapters' own error class, as the package's source modules see it.
  const locker = new SourceLocker(c.client);
  try {
    const one = locker.core.servers[0];
    assert.ok(one);
    const err = one.error(new UnexpectedReply('a reply of type Symbol'));
    assert.ok(err instanceof BadReplyError, String(err));
    assert.ok(!err.isUnavailable() && !err.isRetryable());
  } finally {
    await locker.close();
    await c.close();
    await server.stop();
  }
});
