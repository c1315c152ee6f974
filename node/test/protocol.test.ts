/**
 * Every fact of the contract this package restates is checked against the protocol crate's
 * source (`protocol/src/*.rs`): a change there fails here until the TypeScript follows.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { LIBRARY_VERSION, MAX_ACQUIRE_KEYS, MAX_LABEL_LEN, MAX_PERMITS, MAX_TOKEN_LEN, floorKey, wakeKey } from 'fencedlock';
import * as protocol from '../src/protocol.js';
import { ranking, score } from '../src/ranking.js';
import { REPO } from './support/servers.js';

const source = (file: string): string => readFileSync(join(REPO, 'protocol/src', file), 'utf8');
const command = source('command.rs');
const limits = source('limits.rs');
const errors = source('error.rs');
const functions = source('functions.rs');

/** The value of `pub const NAME: T = value;` in `text`, evaluated for the simple forms used. */
function constant(text: string, name: string): string {
  const match = new RegExp(`pub const ${name}: [^=]+= ([^;]+);`).exec(text);
  assert.ok(match?.[1], `protocol crate lacks pub const ${name}`);
  return match[1].trim();
}

function number(text: string, name: string): number {
  const value = constant(text, name).replace(/_/g, '');
  const shift = /^1 << (\d+)$/.exec(value);
  if (shift?.[1]) return 2 ** Number(shift[1]);
  const product = value.split('*').map((part) => Number(part.trim()));
  assert.ok(product.every(Number.isFinite), `${name} = ${value} is not a number`);
  return product.reduce((a, b) => a * b, 1);
}

function string(text: string, name: string): string {
  return JSON.parse(constant(text, name)) as string;
}

test('the Functions library ships as a byte-for-byte copy of protocol/src/functions.lua', () => {
  const shipped = readFileSync(join(REPO, 'node/functions.lua'));
  const original = readFileSync(join(REPO, 'protocol/src/functions.lua'));
  assert.ok(shipped.equals(original), 'node/functions.lua differs from protocol/src/functions.lua: copy it again (cp protocol/src/functions.lua node/functions.lua)');
});

test('command names and option words are the protocol crate\'s', () => {
  for (const [name, sent] of Object.entries(protocol.COMMANDS)) {
    assert.match(command, new RegExp(`\\n\\s*${name.toUpperCase()} = "${sent.replace('.', '\\.')}",`), `${name}`);
  }
  assert.match(command, new RegExp(`\\n\\s*ACQUIREALL = "${protocol.ACQUIRE_ALL.replace('.', '\\.')}",`), 'acquireAll');
  assert.equal(protocol.BLOCK, string(command, 'BLOCK'));
  assert.equal(protocol.LABEL, string(command, 'LABEL'));
  assert.equal(protocol.PERMITS, string(command, 'PERMITS'));
  assert.equal(protocol.SHARED, string(command, 'SHARED'));
  assert.equal(protocol.SHARED_PERMITS, number(command, 'SHARED_PERMITS'));
});

test('limits are the protocol crate\'s', () => {
  assert.equal(MAX_TOKEN_LEN, number(limits, 'MAX_TOKEN_LEN'));
  assert.equal(MAX_LABEL_LEN, number(limits, 'MAX_LABEL_LEN'));
  assert.equal(MAX_PERMITS, number(limits, 'MAX_PERMITS'));
  assert.equal(MAX_ACQUIRE_KEYS, number(limits, 'MAX_ACQUIRE_KEYS'));
  assert.equal(protocol.DEFAULT_MAX_TTL_MS, number(limits, 'DEFAULT_MAX_TTL_MS'));
  assert.equal(protocol.MAX_MAX_TTL_MS, number(limits, 'MAX_MAX_TTL_MS'));
  assert.equal(constant(limits, 'MAX_BLOCK_MS'), 'MAX_MAX_TTL_MS');
  const lua = readFileSync(join(REPO, 'protocol/src/functions.lua'), 'utf8');
  assert.equal(protocol.LIBRARY_MAX_TTL_MS, Number(/\nlocal MAX_TTL_MS = (\d+)\n/.exec(lua)?.[1]), "the Functions library's longest ttl");
});

test('error codes and texts are the protocol crate\'s, kind by kind', () => {
  const kinds = Object.keys(protocol.REPLY_ERRORS);
  const all = /pub const ALL: \[ReplyError; (\d+)\]/.exec(errors);
  assert.equal(kinds.length, Number(all?.[1]), 'every kind of ReplyError::ALL');
  for (const [kind, { code, prefix }] of Object.entries(protocol.REPLY_ERRORS)) {
    const arm = new RegExp(`ReplyError::${kind} => "([^"]*)",`).exec(errors.slice(errors.indexOf('pub const fn prefix')));
    assert.equal(prefix, arm?.[1], `prefix of ${kind}`);
    const codes = errors.slice(errors.indexOf('pub const fn code'), errors.indexOf('pub const fn prefix'));
    const expected = new RegExp(`ReplyError::${kind}[^=]*=> "(\\w+)"`).exec(codes)?.[1] ?? /_ => "(\w+)"/.exec(codes)?.[1];
    assert.equal(code, expected, `code of ${kind}`);
  }
  const badRequest = errors.slice(errors.indexOf('pub const fn is_bad_request'));
  const listed = [...badRequest.slice(0, badRequest.indexOf(')\n')).matchAll(/ReplyError::(\w+)/g)].map((m) => m[1]);
  assert.deepEqual([...protocol.BAD_REQUESTS].sort(), listed.sort());
});

test('the Functions library\'s names, version and key prefixes are the protocol crate\'s', () => {
  assert.equal(LIBRARY_VERSION, number(functions, 'VERSION'));
  assert.equal(protocol.LIBRARY_NAME, string(functions, 'NAME'));
  assert.equal(protocol.VERSION_FUNCTION, string(functions, 'VERSION_FUNCTION'));
  assert.equal(protocol.FLOOR_KEY_PREFIX, string(functions, 'FLOOR_KEY_PREFIX'));
  assert.equal(protocol.WAKE_KEY_PREFIX, string(functions, 'WAKE_KEY_PREFIX'));
  assert.equal(protocol.WAKE_TTL_MS, number(functions, 'WAKE_TTL_MS'));
  assert.equal(protocol.FLOOR_TAG_LEN, number(functions, 'FLOOR_TAG_LEN'));
  for (const [name, fn] of Object.entries(protocol.FUNCTIONS)) {
    assert.match(functions, new RegExp(`\\(${name.toUpperCase()}, "${fn}"\\)`), name);
  }
  assert.match(functions, new RegExp(`\\(ACQUIREALL, "${protocol.ACQUIRE_ALL_FUNCTION}"\\)`), 'acquireAll');
  // call_keys_all: the keys in order, then the floor key of the first key's slot, last.
  const callKeysAll = functions.slice(functions.indexOf('pub fn call_keys_all'));
  assert.match(callKeysAll.slice(0, callKeysAll.indexOf('\n}\n')), /keys\.iter\(\)\.map\(\|key\| key\.to_vec\(\)\)\.collect\(\);\s*if let Some\(first\) = keys\.first\(\) \{\s*all\.push\(floor_key\(first\)\);/, 'call_keys_all: the keys, then the first key\'s floor');
  assert.deepEqual(protocol.acquireAllKeys(['{t}a', '{t}b']), ['{t}a', '{t}b', floorKey('{t}a')]);
  assert.match(functions, /!matches!\(function\(command\), None \| Some\("fencedlock_cad" \| "fencedlock_status"\)\)/, 'takes_floor: all but cad and status');
  assert.match(functions, /function\(command\) == Some\("fencedlock_release"\)/, 'takes_wake: release');
  assert.ok(!protocol.takesFloor('cad') && !protocol.takesFloor('status') && protocol.takesFloor('acquire') && protocol.takesFloor('raise'));
  assert.ok(protocol.takesWake('release') && !protocol.takesWake('acquire'));
});

test('floor tags: one per slot, of the documented shape, as the protocol crate\'s own examples', () => {
  const tags = new Set<string>();
  for (let slot = 0; slot < 16384; slot++) {
    const tag = protocol.floorTag(slot);
    assert.match(tag, /^[0-7]{2}[0-3]{4}$/);
    assert.equal(protocol.keySlot(Buffer.from(tag)), slot);
    tags.add(tag);
  }
  assert.equal(tags.size, 16384);
  // Every example the crate asserts: floor_key(b"…") == b"…", floor_tag(n) == b"…", wake_key(b"…") == b"…".
  let examples = 0;
  for (const m of functions.matchAll(/assert_eq!\((floor_key|wake_key)\(b"([^"]*)"\), b"([^"]*)"\)/g)) {
    const [, fn, key = '', expected] = m;
    const got = fn === 'floor_key' ? floorKey(key) : wakeKey(key);
    assert.equal(got, expected, `${fn}(${key})`);
    examples++;
  }
  for (const m of functions.matchAll(/assert_eq!\(&floor_tag\((\d+)\), b"(\d+)"\)/g)) {
    assert.equal(protocol.floorTag(Number(m[1])), m[2], `floor_tag(${m[1]})`);
    examples++;
  }
  assert.ok(examples >= 2, 'the protocol crate shows floor-key examples to compare with');
  assert.equal(protocol.keySlot(Buffer.from('lockk')), 6125);
  assert.equal(protocol.keySlot(Buffer.from('{user1000}.following')), protocol.keySlot(Buffer.from('user1000')));
  assert.notEqual(protocol.keySlot(Buffer.from('foo{}{bar}')), protocol.keySlot(Buffer.from('bar')));
});

test('Redlock\'s designated master is the Rust client\'s (rendezvous hash vectors)', () => {
  const waiting = readFileSync(join(REPO, 'client/src/acquisition/waiting.rs'), 'utf8');
  let vectors = 0;
  for (const m of waiting.matchAll(/assert_eq!\(score\("([^"]*)", "([^"]*)"\), 0x([0-9a-f_]+)\);/g)) {
    assert.equal(score(m[1] ?? '', m[2] ?? ''), BigInt(`0x${(m[3] ?? '').replace(/_/g, '')}`), `score(${m[1]}, ${m[2]})`);
    vectors++;
  }
  assert.ok(vectors >= 2);
  const names = ['127.0.0.1:7001', '127.0.0.1:7002', '127.0.0.1:7003'];
  const forward = ranking('invoice:42', names).map((i) => names[i]);
  const reversed = [...names].reverse();
  assert.deepEqual(ranking('invoice:42', reversed).map((i) => reversed[i]), forward);
});
