/**
 * A Redis Cluster of three primaries, with the module and as a managed service (the Functions
 * library, loaded on every primary), through ioredis `Cluster` and node-redis `createCluster`:
 * leases on keys of every primary, routed by key, and waiting.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Cluster } from 'ioredis';
import { createCluster } from 'redis';
import { Locker } from 'fencedlock';
import { suiteCluster } from './support/suites.js';

for (const setup of ['module', 'managed'] as const) describe(`Redis Cluster (${setup})`, () => {
  const nodes = suiteCluster(setup);

  const makers = {
    ioredis: async () => {
      const c = new Cluster(nodes.map((n) => ({ host: '127.0.0.1', port: n.port })));
      c.on('error', () => {});
      return { client: c as object, close: async () => void c.disconnect() };
    },
    'node-redis': async () => {
      const c = createCluster({ rootNodes: nodes.map((n) => ({ url: `redis://127.0.0.1:${n.port}` })) });
      c.on('error', () => {});
      await c.connect();
      return { client: c as object, close: async () => void c.destroy() };
    },
  };
  for (const [kind, make] of Object.entries(makers)) {
    test(`${kind}: keys on every primary are leased, fenced and waited for`, async () => {
      const c = await make();
      const locker = new Locker(c.client, { ttl: 5000, timeout: 2000 });
      try {
        assert.equal(await locker.engine(), setup === 'module' ? 'module' : 'functions');
        const owners = new Set<string>();
        for (let i = 0; i < 12; i++) {
          const key = `cluster:${kind}:${i}`;
          const lease = await locker.acquire(key);
          assert.ok(lease, key);
          assert.equal(await locker.acquire(key), null, `${key} is held`);
          const slot = String(await nodes[0]?.admin(['CLUSTER', 'KEYSLOT', key]));
          for (const n of nodes) {
            const reply = await n.raw(setup === 'module' ? ['FENCEDLOCK.STATUS', key] : ['FCALL_RO', 'fencedlock_status', '1', key]);
            if (Array.isArray(reply)) {
              assert.equal(BigInt(String(reply[0])), lease.fence, `${key} (slot ${slot}) on ${n.port}`);
              owners.add(String(n.port));
            }
          }
          assert.equal(await lease.release(), true);
        }
        assert.equal(owners.size, 3, 'keys on all three primaries');
        const holder = await locker.acquire(`cluster:${kind}:wait`);
        assert.ok(holder);
        const waiting = locker.acquire(`cluster:${kind}:wait`, { wait: 5000 });
        await sleep(100);
        await holder.release();
        const next = await waiting;
        assert.ok(next && next.fence > holder.fence);
        await next.release();
      } finally {
        await locker.close();
        await c.close();
      }
    });
  }
});
