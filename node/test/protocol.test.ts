/**
 * The package's own surface against the contract as data (`protocol/contract.json`, generated
 * by the protocol crate): the functions.lua it ships, the constants and key helpers it exports
 * (`fencedlock`, as built), its floor tags, and Redlock's ranking. Nothing here reads Rust
 * source; `contract-data.test.ts` runs the internal modules on the rest of the file's vectors.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { LIBRARY_VERSION, MAX_ACQUIRE_KEYS, MAX_LABEL_LEN, MAX_PERMITS, MAX_TOKEN_LEN, SHARED_PERMITS, floorKey, wakeKey } from 'fencedlock';
import { LIBRARY } from '../src/engine.js';
import * as protocol from '../src/protocol.js';
import { ranking, score } from '../src/ranking.js';
import { REPO } from './support/servers.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
const contract: Json = JSON.parse(readFileSync(join(REPO, 'protocol/contract.json'), 'utf8'));

/** An integer of the file, exact. */
const int = (value: number | { int: string }): bigint => (typeof value === 'number' ? BigInt(value) : BigInt(value.int));

test('the Functions library the package ships is the one functions.lua', () => {
  // The build copies it (node/functions.lua, ignored by git) from the one committed source.
  const original = readFileSync(join(REPO, contract.library.source));
  assert.ok(readFileSync(join(REPO, 'node/functions.lua')).equals(original), 'node/functions.lua is not protocol/src/functions.lua: npm run build');
  assert.ok(Buffer.from(LIBRARY, 'utf8').equals(original), 'the library the package loads is protocol/src/functions.lua');
  assert.equal(createHash('sha1').update(original).digest('hex'), contract.library.source_sha1);
  const pkg = JSON.parse(readFileSync(join(REPO, 'node/package.json'), 'utf8')) as { files: string[]; exports: Record<string, unknown> };
  assert.ok(pkg.files.includes('functions.lua'));
  assert.equal(pkg.exports['./functions.lua'], './functions.lua');
});

test("command names and option words are the contract's", () => {
  const names = new Set<string>(contract.commands.map((c: Json) => c.name as string));
  for (const name of [...Object.values(protocol.COMMANDS), protocol.ACQUIRE_ALL]) assert.ok(names.has(name), name);
  const words = contract.words;
  assert.deepEqual([protocol.BLOCK, protocol.LABEL, protocol.PERMITS, protocol.SHARED], [words.block, words.label, words.permits, words.shared]);
  assert.equal(SHARED_PERMITS, words.shared_permits);
  const acquire = contract.commands.find((c: Json) => c.name === protocol.COMMANDS.acquire);
  assert.deepEqual(acquire.options.map((o: Json) => o.word), [protocol.BLOCK, protocol.LABEL, protocol.PERMITS, protocol.SHARED]);
});

test("limits are the contract's", () => {
  const limits = contract.limits;
  assert.equal(MAX_TOKEN_LEN, limits.max_token_len);
  assert.equal(MAX_LABEL_LEN, limits.max_label_len);
  assert.equal(MAX_PERMITS, limits.max_permits);
  assert.equal(MAX_ACQUIRE_KEYS, limits.max_acquire_keys);
  assert.equal(protocol.DEFAULT_MAX_TTL_MS, limits.default_max_ttl_ms);
  assert.equal(protocol.MAX_MAX_TTL_MS, limits.max_max_ttl_ms);
  assert.equal(protocol.MAX_BLOCK_MS, limits.max_block_ms);
  assert.equal(protocol.MAX_BLOCK_MS, protocol.MAX_MAX_TTL_MS);
  assert.equal(protocol.LIBRARY_MAX_TTL_MS, contract.library.max_ttl_ms, "the Functions library's longest ttl");
});

test("error codes and texts are the contract's, kind by kind", () => {
  const kinds: Json[] = contract.errors.kinds;
  assert.deepEqual(Object.keys(protocol.REPLY_ERRORS), kinds.map((k) => k.name), 'every kind, in order');
  for (const k of kinds) {
    const kind = k.name as protocol.ReplyErrorKind;
    assert.deepEqual(protocol.REPLY_ERRORS[kind], { code: k.code, prefix: k.prefix }, k.name);
    // The whole reply text starts with the code and the prefix the classifier matches.
    assert.ok((k.text as string).startsWith(`${k.code} ${k.prefix}`), k.name);
    const at = (k.text as string).indexOf(' ');
    assert.equal(protocol.classifyReply(k.code, (k.text as string).slice(at + 1)), kind, k.text);
  }
  assert.deepEqual([...protocol.BAD_REQUESTS].sort(), kinds.filter((k) => k.bad_request).map((k) => k.name as string).sort());
});

test("the Functions library's names, version and key prefixes are the contract's", () => {
  const library = contract.library;
  assert.equal(LIBRARY_VERSION, library.version);
  assert.equal(protocol.LIBRARY_NAME, library.name);
  assert.equal(protocol.VERSION_FUNCTION, library.version_function);
  assert.equal(protocol.FLOOR_KEY_PREFIX, contract.keys.library_floor.prefix);
  assert.equal(protocol.WAKE_KEY_PREFIX, contract.keys.wake.prefix);
  assert.equal(protocol.WAKE_TTL_MS, contract.keys.wake.ttl_ms);
  assert.equal(protocol.FLOOR_TAG_LEN, contract.keys.library_floor.tag_len);
  for (const [command, name] of Object.entries(protocol.COMMANDS)) {
    assert.equal(protocol.FUNCTIONS[command as protocol.CommandName], library.functions[name], command);
    assert.equal(protocol.takesFloor(command as protocol.CommandName), library.takes_floor.includes(name), `takes_floor: ${command}`);
    assert.equal(protocol.takesWake(command as protocol.CommandName), library.takes_wake.includes(name), `takes_wake: ${command}`);
  }
  assert.equal(protocol.ACQUIRE_ALL_FUNCTION, library.functions[protocol.ACQUIRE_ALL]);
  // fencedlock_acquireall: the keys in order, then the floor key of the first key's slot, last.
  assert.deepEqual(protocol.acquireAllKeys(['{t}a', '{t}b']), ['{t}a', '{t}b', floorKey('{t}a')]);
  assert.deepEqual(protocol.acquireAllKeys([]), []);
  // The exported helpers name the keys of the contract's vectors (lock keys are strings here).
  for (const v of contract.vectors.keys) {
    if (typeof v.key !== 'string') continue;
    assert.equal(floorKey(v.key), v.floor_key, v.key);
    assert.equal(wakeKey(v.key), v.wake_key, v.key);
  }
});

test('floor tags: one per slot, of the documented shape, as the contract names them', () => {
  const slots: number = contract.limits.slots;
  const tags = new Set<string>();
  for (let slot = 0; slot < slots; slot++) {
    const tag = protocol.floorTag(slot);
    assert.equal(tag.length, protocol.FLOOR_TAG_LEN);
    assert.match(tag, /^[0-7]{2}[0-3]{4}$/);
    assert.equal(protocol.keySlot(Buffer.from(tag)), slot);
    tags.add(tag);
  }
  assert.equal(tags.size, slots);
  let examples = 0;
  for (const v of contract.vectors.keys) {
    assert.equal(protocol.floorTag(v.slot), v.floor_tag, `floor_tag(${v.slot})`);
    assert.equal(v.floor_key, `${protocol.FLOOR_KEY_PREFIX}${v.floor_tag as string}}`);
    examples++;
  }
  assert.ok(examples >= 2, 'the contract shows floor-key examples to compare with');
  assert.equal(protocol.keySlot(Buffer.from('lockk')), 6125);
  assert.equal(protocol.keySlot(Buffer.from('{user1000}.following')), protocol.keySlot(Buffer.from('user1000')));
  assert.notEqual(protocol.keySlot(Buffer.from('foo{}{bar}')), protocol.keySlot(Buffer.from('bar')));
});

test("Redlock's designated master is the Rust client's (the contract's rendezvous vectors)", () => {
  const cases: Json[] = contract.vectors.ranking;
  assert.ok(cases.length >= 4, 'the contract holds ranking vectors');
  for (const v of cases) {
    const names: string[] = v.names;
    assert.deepEqual(names.map((name) => score(v.key, name)), v.scores.map(int), `scores for ${JSON.stringify(v.key)}`);
    assert.deepEqual(ranking(v.key, names), v.order.map(Number), `ranking for ${JSON.stringify(v.key)}`);
  }
  const names = ['127.0.0.1:7001', '127.0.0.1:7002', '127.0.0.1:7003'];
  const forward = ranking('invoice:42', names).map((i) => names[i]);
  const reversed = [...names].reverse();
  assert.deepEqual(ranking('invoice:42', reversed).map((i) => reversed[i]), forward);
});
