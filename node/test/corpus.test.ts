/**
 * The client failure contract as data (protocol/corpus/client-faults.json; how to read it:
 * protocol/corpus/README.md), run by this client: every scenario, on every engine it names,
 * through ioredis and node-redis, the oldest and the newest of each range package.json
 * declares (the newest is what `npm install ioredis` / `npm install redis` gives a user
 * today; the versions between are the other suites' pins), against real servers with
 * real faults (SIGSTOP, a killed server whose port refuses, a server restarted without the
 * module, DEL on an admin connection). The scenarios are read at run time: nothing of them is
 * restated here. A step, outcome, engine or locker this runner does not know fails the
 * scenario; nothing is skipped.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { ContendedError, FencedLockError, Lease, Locker, QuorumNotReachedError, Redlock, ServerError } from 'fencedlock';
import { EDGES, clientOf, type Client, type ClientVersion } from './support/clients.js';
import { REPO, TestServer, type Setup } from './support/servers.js';

interface Scenario {
  readonly name: string;
  readonly why: string;
  readonly servers: number;
  readonly locker: string;
  readonly engines: readonly string[];
  readonly ttl_ms: number;
  readonly timeout_ms: number;
  readonly steps: readonly Record<string, unknown>[];
}

interface Corpus {
  readonly schema: number;
  readonly outcomes: Record<string, string>;
  readonly key: string;
  readonly scenarios: readonly Scenario[];
}

const CORPUS: Corpus = JSON.parse(readFileSync(join(REPO, 'protocol/corpus/client-faults.json'), 'utf8')) as Corpus;

/** How each engine of the corpus is set up here (servers.ts). */
const SETUPS: Record<string, Setup> = { module: 'module', library: 'managed' };

/** The outcome of an acquire, in the corpus's words (README, "Outcomes"). */
function outcomeOf(result: Lease | null | unknown): string {
  if (result instanceof Lease) return 'granted';
  if (result === null) return 'held';
  if (result instanceof ContendedError) return 'held';
  if (result instanceof QuorumNotReachedError && !result.isUnavailable()) return 'held';
  if (result instanceof ServerError && result.kind === 'NoModule') return 'no_module';
  if (result instanceof FencedLockError && result.isUnavailable()) return 'unavailable';
  return `other (${result instanceof Error ? `${result.name}: ${result.message}` : String(result)})`;
}

function indices(value: unknown, servers: number, step: string): number[] {
  assert.ok(Array.isArray(value) && value.every((i) => Number.isInteger(i) && i >= 0 && i < servers), `${step}: server indices below ${servers}, got ${JSON.stringify(value)}`);
  return value as number[];
}

function ms(value: unknown, what: string): number {
  assert.ok(typeof value === 'number' && value >= 0, `${what} must be a number of ms, got ${JSON.stringify(value)}`);
  return value;
}

/** Whether `key` is held by nobody on `server`, read on an admin connection (README, `free`). */
async function isFree(server: TestServer, engine: string, key: string): Promise<boolean> {
  const reply = engine === 'module' ? await server.admin(['FENCEDLOCK.STATUS', key]) : await server.admin(['FCALL', 'fencedlock_status', '1', key]);
  if (reply === null) return true;
  assert.ok(Array.isArray(reply), `STATUS replied ${String(reply)}`);
  return String(reply[1]) === '0';
}

/** One scenario on one engine through one client version. */
async function run(scenario: Scenario, engine: string, version: ClientVersion): Promise<void> {
  const setup = SETUPS[engine];
  assert.ok(setup, `unknown engine ${engine}`);
  assert.ok(scenario.locker === 'single' || scenario.locker === 'redlock', `unknown locker ${scenario.locker}`);
  const key = CORPUS.key;
  const servers: TestServer[] = [];
  const clients: Client[] = [];
  const lockers: (Locker | Redlock)[] = [];
  const timers: NodeJS.Timeout[] = [];
  /** Ends the body of a kept lease (`using`) at the end of the scenario. */
  let finish: (() => void) | undefined;
  let kept: Promise<unknown> | undefined;
  let signal: AbortSignal | undefined;
  try {
    for (let i = 0; i < scenario.servers; i++) servers.push(await TestServer.start({ setup }));
    // The locker under test, over clients made as the docs show (no options of their own).
    const mine: Client[] = [];
    for (const server of servers) mine.push(await clientOf(version, server.port));
    clients.push(...mine);
    const options = { ttl: scenario.ttl_ms, timeout: scenario.timeout_ms };
    const locker = scenario.locker === 'single' ? new Locker(mine[0]?.client ?? {}, options) : new Redlock(mine.map((c) => c.client), options);
    lockers.push(locker);

    for (const step of scenario.steps) {
      const name = JSON.stringify(step);
      const known = ['hold', 'warm', 'stop', 'resume', 'after_ms', 'kill', 'restart_without_module', 'del', 'acquire', 'expect', 'within_ms', 'not_before_ms', 'lost', 'free'];
      for (const field of Object.keys(step)) assert.ok(known.includes(field), `unknown step field ${field} in ${name}`);
      if ('hold' in step) {
        for (const i of indices(step['hold'], servers.length, 'hold')) {
          const server = servers[i] as TestServer;
          const c = await clientOf(version, server.port);
          clients.push(c);
          const other = new Locker(c.client, { ttl: 60_000, timeout: 2000 });
          lockers.push(other);
          assert.ok(await other.acquire(key), `another owner takes the key on server ${i}`);
        }
      } else if ('warm' in step) {
        const lease = await locker.acquire('corpus:warm');
        assert.ok(lease, 'the warm-up lease');
        await lease.release();
      } else if ('stop' in step) {
        for (const i of indices(step['stop'], servers.length, 'stop')) servers[i]?.signal('SIGSTOP');
      } else if ('resume' in step) {
        const targets = indices(step['resume'], servers.length, 'resume');
        const resume = (): void => {
          for (const i of targets) servers[i]?.signal('SIGCONT');
        };
        const after = step['after_ms'] === undefined ? 0 : ms(step['after_ms'], 'after_ms');
        if (after > 0) timers.push(setTimeout(resume, after));
        else resume();
      } else if ('kill' in step) {
        for (const i of indices(step['kill'], servers.length, 'kill')) await servers[i]?.kill();
      } else if ('restart_without_module' in step) {
        for (const i of indices(step['restart_without_module'], servers.length, 'restart_without_module')) await servers[i]?.restartWithoutModule();
      } else if ('del' in step) {
        for (const i of indices(step['del'], servers.length, 'del')) await servers[i]?.admin(['DEL', key]);
      } else if ('acquire' in step) {
        const ask = step['acquire'] as { wait_ms?: unknown; keep_alive?: unknown };
        const wait = ms(ask.wait_ms ?? 0, 'wait_ms');
        const expect = String(step['expect']);
        assert.ok(expect in CORPUS.outcomes, `unknown outcome ${expect}`);
        const within = ms(step['within_ms'], 'within_ms');
        const notBefore = step['not_before_ms'] === undefined ? 0 : ms(step['not_before_ms'], 'not_before_ms');
        const started = performance.now();
        let result: unknown;
        if (ask.keep_alive === true) {
          // Kept alive: `using`, whose signal is the client's loss signal; its body lasts until
          // the scenario ends.
          const done = new Promise<void>((resolve) => (finish = resolve));
          result = await new Promise<unknown>((resolve) => {
            kept = locker
              .using(key, { wait }, async (s, lease) => {
                signal = s;
                resolve(lease);
                await done;
              })
              .catch((err: unknown) => resolve(err));
          });
        } else {
          assert.ok(ask.keep_alive === undefined || ask.keep_alive === false, `keep_alive must be a boolean in ${name}`);
          result = await locker.acquire(key, { wait }).catch((err: unknown) => err);
        }
        const took = performance.now() - started;
        const got = outcomeOf(result);
        if (result instanceof Lease && ask.keep_alive !== true) await result.release().catch(() => false);
        assert.equal(got, expect, `${name}: expected ${expect}, got ${got} after ${took.toFixed(0)} ms`);
        assert.ok(took <= within, `${name}: ${got} after ${took.toFixed(0)} ms, beyond ${within} ms`);
        assert.ok(took >= notBefore, `${name}: ${got} after ${took.toFixed(0)} ms, before ${notBefore} ms`);
      } else if ('lost' in step) {
        const within = ms(step['within_ms'], 'within_ms');
        const s = signal;
        assert.ok(s, `${name}: no kept lease to lose`);
        const started = performance.now();
        if (!s.aborted) {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, within + 1000);
            s.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
          });
        }
        const took = performance.now() - started;
        assert.ok(s.aborted, `${name}: the loss was not signalled within ${within + 1000} ms`);
        assert.ok(took <= within, `${name}: the loss signalled after ${took.toFixed(0)} ms, beyond ${within} ms`);
      } else if ('free' in step) {
        const within = ms(step['within_ms'], 'within_ms');
        const targets = indices(step['free'], servers.length, 'free');
        const started = performance.now();
        for (;;) {
          const free = await Promise.all(targets.map((i) => isFree(servers[i] as TestServer, engine, key)));
          if (free.every(Boolean)) break;
          assert.ok(performance.now() - started <= within, `${name}: still held after ${within} ms`);
          await new Promise((r) => setTimeout(r, 50));
        }
      } else {
        assert.fail(`unknown step ${name}`);
      }
    }
  } finally {
    for (const timer of timers) clearTimeout(timer);
    for (const server of servers) server.signal('SIGCONT');
    finish?.();
    await kept;
    for (const locker of lockers) await locker.close();
    for (const c of clients) await c.close();
    for (const server of servers) await server.stop();
  }
}

assert.equal(CORPUS.schema, 1, 'a corpus schema this runner reads');
for (const version of EDGES) {
  describe(`the client failure corpus through ${version.label}`, () => {
    let started = 0;
    before(() => (started = performance.now()));
    after(() => console.log(`# corpus through ${version.label}: ${((performance.now() - started) / 1000).toFixed(1)} s`));
    for (const scenario of CORPUS.scenarios) {
      assert.ok(scenario.engines.length > 0, `${scenario.name} names no engine`);
      for (const engine of scenario.engines) {
        test(`${scenario.name} (${engine}): ${scenario.why}`, () => run(scenario, engine, version));
      }
    }
  });
}
