/**
 * Servers for one `describe`: started in its `before` hook and stopped in its `after` hook, so
 * that a suite says in one line what it runs against instead of writing the hooks out again.
 */
import { execFileSync } from 'node:child_process';
import { after, before, describe } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { TestServer, type ServerSpec, type Setup } from './servers.js';

/**
 * `count` servers of `spec` for the enclosing `describe`, continued after its tests (a test may
 * leave one SIGSTOPped) and stopped. The `before` hook fills the array: the tests read it, the
 * describe's own body (which runs first) must not.
 */
export function suiteServers(count: number, spec: ServerSpec): TestServer[] {
  const servers: TestServer[] = [];
  before(async () => {
    for (let i = 0; i < count; i++) servers.push(await TestServer.start(spec));
  });
  after(async () => {
    for (const server of servers.splice(0)) {
      server.signal('SIGCONT');
      await server.stop();
    }
  });
  return servers;
}

/** One server of `spec` for the enclosing `describe`, as {@link suiteServers}: the tests call the function. */
export function suiteServer(spec: ServerSpec): () => TestServer {
  const servers = suiteServers(1, spec);
  return () => {
    const server = servers[0];
    if (!server) throw new Error('the suite server is read before its before hook started it');
    return server;
  };
}

/** A Redis Cluster of three primaries of `setup` for the enclosing `describe`, up (`cluster_state:ok` on every node) before its tests. */
export function suiteCluster(setup: Setup): TestServer[] {
  const nodes = suiteServers(3, { setup, args: ['--cluster-enabled', 'yes', '--cluster-node-timeout', '2000'] });
  before(async () => {
    execFileSync('redis-cli', ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-yes'], { stdio: 'ignore' });
    const deadline = Date.now() + 20_000;
    for (const n of nodes) {
      while (!String(await n.admin(['CLUSTER', 'INFO'])).includes('cluster_state:ok')) {
        if (Date.now() > deadline) throw new Error('the cluster did not come up within 20 s');
        await sleep(100);
      }
    }
  });
  return nodes;
}

/** `body` as a `describe` of its own, `${name} (${setup})`, on a server with the module and on a managed one (the Functions library). */
export function describeOnEachSetup(name: string, body: (server: () => TestServer, setup: Setup) => void): void {
  for (const setup of ['module', 'managed'] as const) {
    describe(`${name} (${setup})`, () => {
      body(suiteServer({ setup }), setup);
    });
  }
}
