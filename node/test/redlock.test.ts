/**
 * Fenced Redlock over three masters: grants by majority with one master stopped, no majority
 * (unavailable) with two gone, fences that rise across different majorities (and, with plain
 * quorum-max fencing, go backwards in the same run), and waiting for a busy lock.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { QuorumNotReachedError, Redlock } from 'fencedlock';
import { CLIENTS, client, type Client, type ClientKind } from './support/clients.js';
import { TestServer, callsOf, commandCalls } from './support/servers.js';
import { suiteServers } from './support/suites.js';

async function redlockOver(kind: ClientKind, masters: readonly TestServer[], fencing: 'raise' | 'quorum-max' = 'raise'): Promise<{ redlock: Redlock; close(): Promise<void> }> {
  const clients: Client[] = [];
  for (const master of masters) clients.push(await client(kind, master.port));
  const redlock = new Redlock(clients.map((c) => c.client), { ttl: 5000, timeout: 200, fencing });
  return {
    redlock,
    close: async () => {
      await redlock.close();
      for (const c of clients) await c.close();
    },
  };
}

for (const kind of CLIENTS) {
  describe(`Redlock over three masters (${kind})`, () => {
    const masters = suiteServers(3, { setup: 'module' });

    test('grants by majority with one master stopped; none with two gone', async () => {
      const { redlock, close } = await redlockOver(kind, masters);
      try {
        const first = await redlock.acquire('rl:stop');
        assert.ok(first);
        assert.equal(await redlock.acquire('rl:stop'), null, 'held: refused');
        assert.equal(await first.release(), true);
        masters[0]?.signal('SIGSTOP');
        const started = performance.now();
        const second = await redlock.acquire('rl:stop');
        assert.ok(second, 'two of three grant');
        assert.ok(second.fence > first.fence);
        assert.ok(performance.now() - started < 200, 'the stopped master is not waited for');
        const releasing = performance.now();
        assert.equal(await second.release(), true);
        assert.ok(performance.now() - releasing < 150, 'nor by the release: a majority answered');
        masters[1]?.signal('SIGSTOP');
        const none = await redlock.acquire('rl:stop').catch((e: unknown) => e);
        assert.ok(none instanceof QuorumNotReachedError, String(none));
        assert.ok(none.isUnavailable() && none.isRetryable());
      } finally {
        masters[0]?.signal('SIGCONT');
        masters[1]?.signal('SIGCONT');
        await close();
      }
    });

    test('fenced: fences rise across different majorities; quorum-max goes backwards', async () => {
      const key = 'rl:fence';
      // Master 0 issues far higher fences than the others (an epoch started there).
      await masters[0]?.admin(['DEBUG', 'RELOAD']);
      // Plain quorum-max first: the raise would lift the others' high-water marks for good.
      for (const fencing of ['quorum-max', 'raise'] as const) {
        for (const m of masters) await m.admin(['DEL', key]);
        const { redlock, close } = await redlockOver(kind, masters, fencing);
        try {
          // The first majority is {0, 1}, the next {1, 2}.
          masters[2]?.signal('SIGSTOP');
          const high = await redlock.acquire(key);
          masters[2]?.signal('SIGCONT');
          assert.ok(high);
          await high.release();
          masters[0]?.signal('SIGSTOP');
          const next = await redlock.acquire(key);
          masters[0]?.signal('SIGCONT');
          assert.ok(next);
          await next.release();
          if (fencing === 'raise') assert.ok(next.fence > high.fence, `${next.fence} after ${high.fence}`);
          else assert.ok(next.fence < high.fence, 'plain Redlock: a later majority without master 0 goes backwards');
        } finally {
          masters[0]?.signal('SIGCONT');
          masters[2]?.signal('SIGCONT');
          await close();
        }
      }
    });

    test('fenced: only the masters below the fence are raised; grants that agree need no RAISE', async () => {
      const key = 'rl:agree';
      const raises = async (m: TestServer | undefined): Promise<number> => (m ? callsOf(await commandCalls(m), 'fencedlock.raise') : 0);
      const fenceOf = async (m: TestServer | undefined): Promise<bigint> => {
        const status = (await m?.admin(['FENCEDLOCK.STATUS', key])) as unknown[];
        return BigInt(String(status[0]));
      };
      // The key's fence on `m` set by a lease taken, raised and released there.
      const setFence = async (m: TestServer | undefined, fence: bigint): Promise<void> => {
        assert.notEqual(await m?.admin(['FENCEDLOCK.ACQUIRE', key, 'setter', '60000']), null);
        assert.equal(String(await m?.admin(['FENCEDLOCK.RAISE', key, 'setter', String(fence)])), String(fence));
        assert.equal(String(await m?.admin(['FENCEDLOCK.RELEASE', key, 'setter'])), '1');
      };
      for (const m of masters) {
        await m.admin(['DEL', key]);
        assert.notEqual(await m.admin(['FENCEDLOCK.ACQUIRE', key, 'first', '60000']), null);
        assert.equal(String(await m.admin(['FENCEDLOCK.RELEASE', key, 'first'])), '1');
      }
      let high = 0n;
      for (const m of masters) {
        const f = await fenceOf(m);
        if (f > high) high = f;
      }
      await setFence(masters[2], high + 1000n);
      // Master 0 refuses (another holder), so the majority must include master 2.
      assert.notEqual(await masters[0]?.admin(['FENCEDLOCK.ACQUIRE', key, 'other', '60000']), null);
      const { redlock, close } = await redlockOver(kind, masters);
      try {
        const before = await Promise.all(masters.map(raises));
        const lease = await redlock.acquire(key);
        assert.ok(lease);
        assert.equal(lease.fence, high + 1001n);
        assert.equal(await raises(masters[2]), before[2], 'no RAISE to the master whose grant carried the fence');
        assert.equal(await raises(masters[1]), (before[1] ?? 0) + 1, 'the master below it was raised');
        assert.equal(await fenceOf(masters[1]), lease.fence);
        assert.equal(await lease.release(), true);
        assert.equal(String(await masters[0]?.admin(['FENCEDLOCK.RELEASE', key, 'other'])), '1');

        for (const m of masters) await setFence(m, lease.fence + 10n);
        const agreed = await Promise.all(masters.map(raises));
        const again = await redlock.acquire(key);
        assert.ok(again);
        assert.equal(again.fence, lease.fence + 11n);
        assert.deepEqual(await Promise.all(masters.map(raises)), agreed, 'grants that agree need no RAISE');
        assert.equal(await again.release(), true);
      } finally {
        await close();
      }
    });

    test('a waiter is granted at the release', async () => {
      const { redlock, close } = await redlockOver(kind, masters);
      try {
        const holder = await redlock.acquire('rl:wait');
        assert.ok(holder);
        const waiting = redlock.acquire('rl:wait', { wait: 5000 });
        await new Promise((r) => setTimeout(r, 100));
        const releasedAt = performance.now();
        await holder.release();
        const lease = await waiting;
        assert.ok(lease && lease.fence > holder.fence);
        assert.ok(performance.now() - releasedAt < 500, 'at the release, not at a poll');
        await lease.release();
      } finally {
        await close();
      }
    });
  });
}

for (const kind of CLIENTS) {
  test(`${kind}: a wait over three masters without the module, two stopped, ends in an outage error, not undefined`, async () => {
    const masters: TestServer[] = [];
    for (let i = 0; i < 3; i++) masters.push(await TestServer.start({ setup: 'managed' }));
    const { redlock, close } = await redlockOver(kind, masters);
    try {
      const warm = await redlock.acquire('rl:outage:warm');
      assert.ok(warm);
      await warm.release();
      masters[1]?.signal('SIGSTOP');
      masters[2]?.signal('SIGSTOP');
      const started = performance.now();
      const err = await redlock.acquire('rl:outage', { wait: 1000 }).then(
        (lease) => ({ lease }),
        (e: unknown) => e,
      );
      const took = performance.now() - started;
      assert.ok(err instanceof QuorumNotReachedError, `rejects with a QuorumNotReachedError, got ${String(err)}`);
      assert.equal(err.isUnavailable(), true, 'no master refused: an outage');
      assert.ok(took >= 950 && took < 4000, `within the wait and a round: ${took.toFixed(0)} ms`);
    } finally {
      for (const m of masters) m.signal('SIGCONT');
      await close();
      for (const m of masters) await m.stop();
    }
  });
}
