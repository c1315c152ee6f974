/**
 * Engine detection as the Rust client does it: an older library is replaced, a forced engine
 * is used as told, and a server with neither engine is a `NoEngineError` naming the ways out.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { test } from 'node:test';

import { InvalidArgumentError, Locker, NoEngineError, Redlock } from 'fencedlock';
import { LIBRARY } from '../src/library.js';
import { CLIENTS, client, withLocker } from './support/clients.js';
import { TestServer } from './support/servers.js';

test('a server with neither engine is a NoEngineError, and nothing is written', async () => {
  const server = await TestServer.start({ setup: 'managed-no-scripts' });
  try {
    for (const kind of CLIENTS) {
      await withLocker(kind, server.port, undefined, async (locker) => {
        const err = await locker.acquire('k').catch((e: unknown) => e);
        assert.ok(err instanceof NoEngineError, String(err));
        assert.equal(err.kind, 'NoEngine');
        assert.ok(!err.isRetryable() && !err.isUnavailable());
        assert.match(err.message, /load the module .* FUNCTION LOAD REPLACE/);
        // It names the library this package carries, at the path npm installs it to.
        const path = /node_modules\/fencedlock\/(functions\.lua)/.exec(err.message)?.[1];
        assert.ok(path, `the message names the package's functions.lua: ${err.message}`);
        assert.equal(readFileSync(createRequire(import.meta.url).resolve(`fencedlock/${path}`), 'utf8'), LIBRARY);
        assert.equal(await server.admin(['DBSIZE']), '0');
      });
    }
  } finally {
    await server.stop();
  }
});

test('a module server that hides COMMAND is served by the module, and no library is loaded there', async () => {
  const server = await TestServer.start({
    setup: 'module',
    args: ['--user', 'default', 'on', 'nopass', '~*', '&*', '+@all', '-command'],
  });
  try {
    for (const kind of CLIENTS) {
      await withLocker(kind, server.port, undefined, async (locker) => {
        assert.equal(await locker.engine(), 'module', kind);
        const lease = await locker.acquire(`hidden:${kind}`);
        assert.ok(lease, kind);
        assert.equal(await server.admin(['TYPE', `hidden:${kind}`]), 'fencelock', `${kind}: the module's key`);
        await lease.release();
        assert.deepEqual(await server.admin(['FUNCTION', 'LIST']), [], `${kind}: no library loaded`);
      });
    }
  } finally {
    await server.stop();
  }
});

test('a library of this version with other code is replaced, through either client', async () => {
  const server = await TestServer.start({ setup: 'managed' });
  try {
    for (const kind of CLIENTS) {
      const altered = LIBRARY.replace('\nlocal RETENTION_MS = ', '\n-- altered\nlocal RETENTION_MS = ');
      await server.admin(['FUNCTION', 'LOAD', 'REPLACE', altered]);
      await withLocker(kind, server.port, undefined, async (locker) => {
        assert.equal(await locker.engine(), 'functions');
        const listed = await server.raw(['FUNCTION', 'LIST', 'LIBRARYNAME', 'fencedlock', 'WITHCODE']);
        assert.ok(!String(listed).includes('-- altered'), `${kind}: the package's own library is loaded now`);
      });
    }
  } finally {
    await server.stop();
  }
});

test('an older library is replaced; a forced engine is used as told', async () => {
  const server = await TestServer.start({ setup: 'managed' });
  try {
    const older = LIBRARY.replace(/\nlocal VERSION = \d+\n/, '\nlocal VERSION = 1\n');
    await server.admin(['FUNCTION', 'LOAD', 'REPLACE', older]);
    assert.equal(await server.raw(['FCALL_RO', 'fencedlock_version', '0']), '1');
    const c = await client('ioredis', server.port);
    const locker = new Locker(c.client);
    const script = new Locker(c.client, { engine: 'script' });
    const module = new Locker(c.client, { engine: 'module' });
    try {
      assert.equal(await locker.engine(), 'functions');
      assert.notEqual(await server.raw(['FCALL_RO', 'fencedlock_version', '0']), '1', 'the older library was replaced');
      assert.equal(await script.engine(), 'script');
      const lease = await script.acquire('forced');
      assert.ok(lease);
      assert.equal(await locker.acquire('forced'), null, 'the script and the library share the key');
      await lease.release();
      const err = await module.acquire('forced').catch((e: unknown) => e);
      assert.equal((err as { kind?: string }).kind, 'NoModule');
      assert.throws(() => new Locker(c.client, { engine: 'nonsense' as 'auto' }), InvalidArgumentError);
    } finally {
      await locker.close();
      await script.close();
      await module.close();
      await c.close();
    }
  } finally {
    await server.stop();
  }
});

test('Locker.open and Redlock.open make a connection of their own from a URL and close it', async () => {
  const server = await TestServer.start({ setup: 'module' });
  try {
    const before = Number(String(await server.admin(['INFO', 'clients'])).match(/connected_clients:(\d+)/)?.[1]);
    const locker = await Locker.open(`redis://127.0.0.1:${server.port}`, { ttl: 2000 });
    const redlock = await Redlock.open([`redis://127.0.0.1:${server.port}`]);
    const lease = await locker.acquire('by-url');
    assert.ok(lease && lease.fence > 0n);
    assert.equal(await redlock.acquire('by-url'), null, 'the same server: held');
    await lease.release();
    await locker.close();
    await redlock.close();
    await new Promise((r) => setTimeout(r, 100));
    const after = Number(String(await server.admin(['INFO', 'clients'])).match(/connected_clients:(\d+)/)?.[1]);
    assert.equal(after, before, 'every connection the lockers opened is closed');
  } finally {
    await server.stop();
  }
});
