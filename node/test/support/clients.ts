/**
 * The clients under test, made the way an application makes them: ioredis and node-redis at
 * the versions package.json's devDependencies pin (the suites' `CLIENTS`), and every version
 * of `VERSIONS`, the oldest and newest of each range `peerDependencies` declares, installed
 * side by side under npm aliases (`ioredis-5.3`, `redis-6`, …).
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

import * as ioredis from 'ioredis';
import * as ioredis53 from 'ioredis-5.3';
import * as ioredis6 from 'ioredis-6';
import * as nodeRedis from 'redis';
import * as nodeRedis50 from 'redis-5.0';
import * as nodeRedis6 from 'redis-6';
import * as nodeRedis4 from 'redis-4';
import type { RedisOptions } from 'ioredis';
import { Locker, type LockerOptions } from 'fencedlock';

import { REPO } from './servers.js';

export type ClientKind = 'ioredis' | 'node-redis';
export const CLIENTS: readonly ClientKind[] = ['ioredis', 'node-redis'];

export interface Client {
  readonly kind: ClientKind;
  readonly client: object;
  close(): Promise<void>;
}

/** What an ioredis module exports that the tests use (any of its versions). */
interface IORedisModule {
  readonly Redis: new (options: object) => { on(e: string, f: () => void): unknown; connect(): Promise<void>; disconnect(): void };
}

/** What a node-redis module exports that the tests use (any of its versions). */
interface NodeRedisModule {
  readonly createClient: (options: object) => { on(e: string, f: () => void): unknown; connect(): Promise<unknown>; destroy?(): void; disconnect?(): Promise<void> };
}

/** One client library at one version: the package name it is installed under. */
export interface ClientVersion {
  readonly kind: ClientKind;
  /** The package directory under node_modules (`ioredis`, `ioredis-6`, `redis-5.0`, …). */
  readonly pkg: string;
  /** The version installed there (read from its package.json). */
  readonly version: string;
  /** `ioredis 6.1.0`, `node-redis 5.0.0`. */
  readonly label: string;
  readonly module: IORedisModule | NodeRedisModule;
}

function installed(kind: ClientKind, pkg: string, module: unknown): ClientVersion {
  const version = (JSON.parse(readFileSync(join(REPO, 'node/node_modules', pkg, 'package.json'), 'utf8')) as { version: string }).version;
  return { kind, pkg, version, label: `${kind} ${version}`, module: module as IORedisModule | NodeRedisModule };
}

/** The oldest and the newest of every range `peerDependencies` admits, and the suites' own pins. */
export const VERSIONS: readonly ClientVersion[] = [
  installed('ioredis', 'ioredis-5.3', ioredis53),
  installed('ioredis', 'ioredis', ioredis),
  installed('ioredis', 'ioredis-6', ioredis6),
  installed('node-redis', 'redis-5.0', nodeRedis50),
  installed('node-redis', 'redis', nodeRedis),
  installed('node-redis', 'redis-6', nodeRedis6),
];

/** The oldest and the newest of each library: the ends of the ranges `peerDependencies` declares. */
export const EDGES: readonly ClientVersion[] = CLIENTS.flatMap((kind) => {
  const of = VERSIONS.filter((v) => v.kind === kind);
  const oldest = of.reduce((a, b) => (compare(a.version, b.version) <= 0 ? a : b));
  const newest = of.reduce((a, b) => (compare(a.version, b.version) >= 0 ? a : b));
  return [oldest, newest];
});

/** node-redis 4, which the peer range does not admit: the locker must refuse it by name. */
export const NODE_REDIS_4 = nodeRedis4 as unknown as NodeRedisModule;

/** ioredis 4 (no types of its own), which the peer range does not admit either. */
export const IOREDIS_4 = createRequire(import.meta.url)('ioredis-4') as new (options: object) => object;

function compare(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) - (pb[i] ?? 0);
  return 0;
}

/** A client of `version` connected to 127.0.0.1:`port`. */
export async function clientOf(version: ClientVersion, port: number, options: RedisOptions = {}): Promise<Client> {
  const { kind } = version;
  if (kind === 'ioredis') {
    const { Redis } = version.module as IORedisModule;
    const redis = new Redis({ host: '127.0.0.1', port, lazyConnect: true, ...options });
    redis.on('error', () => {});
    await redis.connect();
    return { kind, client: redis, close: async () => void redis.disconnect() };
  }
  const { createClient } = version.module as NodeRedisModule;
  const redis = createClient({ socket: { host: '127.0.0.1', port, reconnectStrategy: (retries: number) => Math.min(retries * 50, 500) } });
  redis.on('error', () => {});
  await redis.connect();
  return { kind, client: redis, close: async () => void (redis.destroy ? redis.destroy() : await redis.disconnect?.()) };
}

/** A client of the suites' own pin of `kind`. */
export function client(kind: ClientKind, port: number, options: RedisOptions = {}): Promise<Client> {
  const pinned = VERSIONS.find((v) => v.kind === kind && (v.pkg === 'ioredis' || v.pkg === 'redis'));
  if (!pinned) throw new Error(`no pinned ${kind}`);
  return clientOf(pinned, port, options);
}

/**
 * A locker and a rival (10 s leases), each on a client of its own of `kind` to `port`, for
 * `body`; both closed, with their clients, once it is done.
 */
export async function withLockerAndRival(kind: ClientKind, port: number, body: (locker: Locker, rival: Locker) => Promise<void>): Promise<void> {
  const c = await client(kind, port);
  const r = await client(kind, port);
  const locker = new Locker(c.client, { ttl: 10_000 });
  const rival = new Locker(r.client, { ttl: 10_000 });
  try {
    await body(locker, rival);
  } finally {
    await locker.close();
    await rival.close();
    await c.close();
    await r.close();
  }
}

/** A locker of `options` on a client of its own of `kind` to `port`, for `body`; closed, with its client, once it is done. */
export async function withLocker(kind: ClientKind, port: number, options: LockerOptions | undefined, body: (locker: Locker) => Promise<void>): Promise<void> {
  const c = await client(kind, port);
  const locker = new Locker(c.client, options);
  try {
    await body(locker);
  } finally {
    await locker.close();
    await c.close();
  }
}
