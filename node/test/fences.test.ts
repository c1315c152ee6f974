/**
 * Fences are exact `bigint`s and only rise: above 2^53 after the module starts an epoch
 * (`DEBUG RELOAD` loads from disk), across `DEL`, a restart and a replica's promotion, on both
 * engines, through both clients.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Locker } from 'fencedlock';
import { CLIENTS, client, withLocker, type ClientKind } from './support/clients.js';
import { TestServer, replicaOf, type Setup } from './support/servers.js';

/** The key's fence as the server wrote it, read by the tests' own RESP client. */
async function serverFence(server: TestServer, key: string): Promise<bigint> {
  const status = await server.raw(server.spec.setup === 'module' ? ['FENCEDLOCK.STATUS', key] : ['FCALL_RO', 'fencedlock_status', '1', key]);
  assert.ok(Array.isArray(status), `STATUS of ${key}: ${String(status)}`);
  return BigInt(String(status[0]));
}

describe('fences above 2^53 after an epoch (module)', () => {
  let server: TestServer;
  before(async () => {
    server = await TestServer.start({ setup: 'module' });
    await server.admin(['DEBUG', 'RELOAD']);
  });
  after(() => server.stop());

  const cases: [ClientKind, string, object][] = [
    ['ioredis', 'made without stringNumbers (the default)', {}],
    ['ioredis', 'made with stringNumbers', { stringNumbers: true }],
    ['ioredis', 'made with stringNumbers and a keyPrefix (not applied to lock keys)', { stringNumbers: true, keyPrefix: 'app:' }],
    ['node-redis', 'as made', {}],
  ];
  for (const [kind, how, options] of cases) {
    test(`${kind} ${how}: the fence is the server's, digit for digit`, async () => {
      const c = await client(kind, server.port, options);
      const locker = new Locker(c.client);
      try {
        const key = `epoch:${kind}:${how}`;
        const lease = await locker.acquire(key);
        assert.ok(lease);
        assert.ok(lease.fence > 2n ** 53n, `fence ${lease.fence} is past 2^53 after the epoch`);
        assert.equal(lease.fence, await serverFence(server, key));
        const status = await locker.status(key);
        assert.equal(status?.fence, lease.fence);
        await lease.release();
        const next = await locker.acquire(key);
        assert.equal(next?.fence, lease.fence + 1n, 'one above, exactly');
        await next?.release();
        if (kind === 'ioredis') {
          assert.equal((c.client as { options: { stringNumbers?: boolean } }).options.stringNumbers, 'stringNumbers' in options ? true : false, "the user's client options are untouched");
        }
      } finally {
        await locker.close();
        await c.close();
      }
    });
  }
});

for (const setup of ['module', 'managed'] as Setup[]) {
  describe(`fences rise across DEL, restart and promotion (${setup})`, () => {
    let primary: TestServer;
    let replica: TestServer;
    before(async () => {
      primary = await TestServer.start({ setup, args: ['--appendonly', 'yes', '--appendfsync', 'always'] });
      replica = await replicaOf(primary);
    });
    after(async () => {
      await replica.stop();
      await primary.stop();
    });

    for (const kind of CLIENTS) {
      test(`${kind}`, async () => {
        const key = `rise:${kind}`;
        const seen: bigint[] = [];
        const take = async (port: number): Promise<void> => {
          await withLocker(kind, port, { timeout: 2000 }, async (locker) => {
            const lease = await locker.acquire(key);
            assert.ok(lease, `granted on ${port}`);
            seen.push(lease.fence);
            await lease.release();
          });
        };
        await take(primary.port);
        await primary.admin(['DEL', key]);
        await take(primary.port);
        await primary.restart();
        await primary.admin(['DEL', key]);
        await take(primary.port);
        await primary.admin(['WAIT', '1', '2000']);
        await replica.admin(['REPLICAOF', 'NO', 'ONE']);
        await replica.admin(['DEL', key]);
        await take(replica.port);
        for (let i = 1; i < seen.length; i++) {
          assert.ok((seen[i] ?? 0n) > (seen[i - 1] ?? 0n), `fences only rise: ${seen.join(', ')}`);
        }
        await replica.admin(['REPLICAOF', '127.0.0.1', String(primary.port)]);
        await replica.admin(['CONFIG', 'SET', 'replica-read-only', 'yes']);
        await primary.admin(['DEL', key]);
      });
    }
  });
}
