/** The two clients under test, made the way an application makes them. */
import { Redis, type RedisOptions } from 'ioredis';
import { createClient } from 'redis';

export type ClientKind = 'ioredis' | 'node-redis';
export const CLIENTS: readonly ClientKind[] = ['ioredis', 'node-redis'];

export interface Client {
  readonly kind: ClientKind;
  readonly client: object;
  close(): Promise<void>;
}

export async function client(kind: ClientKind, port: number, options: RedisOptions = {}): Promise<Client> {
  if (kind === 'ioredis') {
    const redis = new Redis({ host: '127.0.0.1', port, lazyConnect: true, ...options });
    redis.on('error', () => {});
    await redis.connect();
    return { kind, client: redis, close: async () => void redis.disconnect() };
  }
  const redis = createClient({ socket: { host: '127.0.0.1', port, reconnectStrategy: (retries: number) => Math.min(retries * 50, 500) } });
  redis.on('error', () => {});
  await redis.connect();
  return { kind, client: redis, close: async () => void redis.destroy() };
}
