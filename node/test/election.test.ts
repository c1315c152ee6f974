/**
 * Election: one leader at a time, its epoch (the fence) rising with every new leader, the
 * next candidate elected at a resignation, observers seeing each change, and a deposed
 * leader's signal aborted.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';

import { Election, Locker, type Leader } from 'fencedlock';
import { CLIENTS, client } from './support/clients.js';
import { describeOnEachSetup } from './support/suites.js';

describeOnEachSetup('election', (server) => {
  for (const kind of CLIENTS) {
    test(`${kind}: candidates lead in turn with rising epochs, observed, and a deposed leader is told`, async () => {
      const a = await client(kind, server().port);
      const b = await client(kind, server().port);
      const key = `election:${kind}`;
      const first = new Election(new Locker(a.client, { ttl: 900 }), key);
      const second = new Election(new Locker(b.client, { ttl: 900 }), key);
      const stop = new AbortController();
      const seen: (Leader | null)[] = [];
      const observer = (async () => {
        for await (const leader of first.observe({ interval: 20, signal: stop.signal })) seen.push(leader);
      })();
      try {
        const leading = await first.campaign('host-a');
        const leader = await second.leader();
        assert.equal(leader?.label?.toString(), 'host-a');
        assert.equal(leader?.epoch, leading.epoch);
        const campaign = second.campaign('host-b');
        await new Promise((r) => setTimeout(r, 400)); // the leader renews meanwhile
        assert.equal(leading.signal.aborted, false);
        assert.equal(await leading.resign(), true);
        const next = await campaign;
        assert.ok(next.epoch > leading.epoch, 'a new leader has a higher epoch');
        assert.equal((await first.leader())?.label?.toString(), 'host-b');
        await new Promise((r) => setTimeout(r, 100)); // the observer samples every 20 ms
        await server().admin(['DEL', key]);
        await once(next.signal, 'abort');
        assert.equal((next.signal.reason as Error).name, 'LeaseLostError');
        await new Promise((r) => setTimeout(r, 100));
        stop.abort();
        await observer;
        const labels = seen.map((l) => l?.label?.toString() ?? null);
        assert.ok(labels.includes('host-a') && labels.includes('host-b'), `observed ${JSON.stringify(labels)}`);
        assert.ok(labels.indexOf('host-a') < labels.indexOf('host-b'));
      } finally {
        stop.abort();
        await first.locker.close();
        await second.locker.close();
        await a.close();
        await b.close();
      }
    });
  }
});
