/**
 * The command contract's cases as data (protocol/corpus/conformance.json; how a runner runs
 * them: protocol/corpus/README.md, "The contract cases"), run by this package against real
 * servers: a server with the module (the reference), a managed server with the package's
 * Functions library (`FCALL`), and a managed server where `FUNCTION` is denied, answering the
 * package's script by `EVALSHA`. Every request is built by the package's own builders
 * (engine.ts `request`/`requestAll`, acquire-request.ts `acquireWords`/`acquireAllWords`, the
 * floor and wake-up keys of protocol.ts); the README's rule builds only the shapes the package
 * never sends (see `readmeWords`). Each step goes to the module, then to each library server,
 * and every library reply must agree with the module's once normalised, except the corpus's
 * listed differences, which must differ exactly as listed. The cases are read at run time:
 * nothing of them is restated here. A step, field, key form or difference this runner does not
 * know fails the run; nothing is skipped. One server flavor per run (the default), as
 * corpus.test.ts does.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { acquireAllWords, acquireWords, type AcquireRequest } from '../src/acquire-request.js';
import type { Arg } from '../src/connection.js';
import { LIBRARY, SCRIPT, SCRIPT_SHA, request, requestAll, type Engine } from '../src/engine.js';
import {
  ACQUIRE_ALL,
  ACQUIRE_ALL_FUNCTION,
  BLOCK,
  COMMANDS,
  FUNCTIONS,
  LABEL,
  LIBRARY_NAME,
  PERMITS,
  SHARED,
  WAKE_KEY_PREFIX,
  floorKey,
  floorTag,
  keySlot,
  takesFloor,
  takesWake,
  type CommandName,
} from '../src/protocol.js';
import { ExactConnection, type Resp } from './support/resp-exact.js';
import { REPO, TestServer, type Setup } from './support/servers.js';

// ---------------------------------------------------------------------------------------------
// The corpus, as the file has it.

/** A byte string: text (UTF-8), or `{"hex": …}`. */
type Bytes = string | { readonly hex: string };

interface Case {
  readonly name: string;
  readonly key: Bytes;
  readonly steps: readonly Record<string, unknown>[];
}

interface Difference {
  readonly case: string;
  readonly step: number;
  readonly why: string;
}

interface Corpus {
  readonly schema: number;
  readonly about: string;
  readonly cases: readonly Case[];
  readonly differences: readonly Difference[];
}

const CORPUS = JSON.parse(readFileSync(join(REPO, 'protocol/corpus/conformance.json'), 'utf8')) as Corpus;

/** The error texts of the contract, by kind (contract.json: the package's build keeps only the prefixes). */
const ERROR_TEXTS = new Map<string, string>(
  (JSON.parse(readFileSync(join(REPO, 'protocol/contract.json'), 'utf8')) as { errors: { kinds: { name: string; text: string }[] } }).errors.kinds.map((k) => [k.name, k.text]),
);

function bytesOf(value: unknown, what: string): Buffer {
  if (typeof value === 'string') return Buffer.from(value, 'utf8');
  if (value !== null && typeof value === 'object' && Object.keys(value).length === 1 && typeof (value as { hex?: unknown }).hex === 'string') {
    const hex = (value as { hex: string }).hex;
    assert.match(hex, /^(?:[0-9a-f]{2})*$/, `${what}: bad hex ${hex}`);
    return Buffer.from(hex, 'hex');
  }
  assert.fail(`${what}: not a byte string: ${JSON.stringify(value)}`);
}

/** A step's argument, resolved for one server: bytes, the case's key, or that server's highest fence plus d. */
function resolveWord(word: unknown, key: Buffer, fences: readonly bigint[], what: string): Buffer {
  if (word !== null && typeof word === 'object' && !('hex' in word)) {
    const fields = Object.keys(word);
    if (fields.length === 1 && (word as { key?: unknown }).key === true) return key;
    const delta = (word as { fence_plus?: unknown }).fence_plus;
    if (fields.length === 1 && typeof delta === 'number' && Number.isInteger(delta)) {
      assert.ok(fences.length > 0, `${what}: fence_plus before any fence was replied`);
      const highest = fences.reduce((a, b) => (b > a ? b : a));
      return Buffer.from(String(highest + BigInt(delta)));
    }
    assert.fail(`${what}: unknown argument ${JSON.stringify(word)}`);
  }
  return bytesOf(word, what);
}

/** The key forms of the README (`keys`). */
type KeyForm = { readonly form: 'with_floor' | 'key_only' | 'none' } | { readonly form: 'member'; readonly suffix: string } | { readonly form: 'set'; readonly suffixes: readonly string[] };

function keyForm(value: unknown, what: string): KeyForm {
  if (value === 'with_floor' || value === 'key_only' || value === 'none') return { form: value };
  if (value !== null && typeof value === 'object' && Object.keys(value).length === 1) {
    const member = (value as { member?: unknown }).member;
    if (typeof member === 'string') return { form: 'member', suffix: member };
    const set = (value as { set?: unknown }).set;
    if (Array.isArray(set) && set.every((s) => typeof s === 'string')) return { form: 'set', suffixes: set as string[] };
  }
  assert.fail(`${what}: unknown key form ${JSON.stringify(value)}`);
}

type Step =
  | { readonly kind: 'call'; readonly call: string; readonly keys: KeyForm; readonly args: readonly unknown[]; readonly blockMs: number | undefined }
  | { readonly kind: 'raw'; readonly words: readonly unknown[] }
  | { readonly kind: 'sleep'; readonly ms: number };

/** A step of the file, every field known (else the run fails). */
function stepOf(raw: Record<string, unknown>, what: string): Step {
  const fields = Object.keys(raw).sort().join(',');
  if ('call' in raw) {
    assert.ok(fields === 'args,call,keys' || fields === 'args,block_ms,call,keys', `${what}: unknown step fields ${fields}`);
    assert.ok(typeof raw['call'] === 'string', `${what}: call must be a command name`);
    assert.ok(Array.isArray(raw['args']), `${what}: args must be a list`);
    const blockMs = raw['block_ms'];
    assert.ok(blockMs === undefined || (typeof blockMs === 'number' && Number.isInteger(blockMs) && blockMs > 0), `${what}: bad block_ms`);
    return { kind: 'call', call: raw['call'], keys: keyForm(raw['keys'], what), args: raw['args'] as unknown[], blockMs: blockMs as number | undefined };
  }
  if ('raw' in raw) {
    assert.ok(fields === 'raw' && Array.isArray(raw['raw']) && raw['raw'].length > 0, `${what}: unknown step ${JSON.stringify(raw)}`);
    return { kind: 'raw', words: raw['raw'] as unknown[] };
  }
  if ('sleep_ms' in raw) {
    const ms = raw['sleep_ms'];
    assert.ok(fields === 'sleep_ms' && typeof ms === 'number' && Number.isInteger(ms) && ms >= 0, `${what}: unknown step ${JSON.stringify(raw)}`);
    return { kind: 'sleep', ms };
  }
  assert.fail(`${what}: unknown step ${JSON.stringify(raw)}`);
}

// ---------------------------------------------------------------------------------------------
// Requests: the package's builders, and the README's rule where the package has none.

/** The package's name of each single-key command (`FENCEDLOCK.ACQUIRE` → `acquire`). */
const NAMES = new Map<string, CommandName>(Object.entries(COMMANDS).map(([name, command]) => [command, name as CommandName]));

/** `bytes` as the string the package would send as them (its keys and tokens are strings, sent as UTF-8), if there is one. */
function text(bytes: Buffer): string | undefined {
  const s = bytes.toString('utf8');
  return Buffer.from(s, 'utf8').equals(bytes) ? s : undefined;
}

/** An integer as the package writes one (`String(n)`), if `bytes` is one. */
function integer(bytes: Buffer | undefined): number | undefined {
  const s = bytes === undefined ? undefined : text(bytes);
  if (s === undefined || !/^-?(?:0|[1-9][0-9]*)$/.test(s)) return undefined;
  const n = Number(s);
  return Number.isSafeInteger(n) && String(n) === s ? n : undefined;
}

const word = (bytes: Buffer | undefined, expected: string): boolean => bytes !== undefined && bytes.equals(Buffer.from(expected));

/** A word as the bytes it is sent as (text as UTF-8). */
const bytesOfArg = (w: Arg): Buffer => (typeof w === 'string' ? Buffer.from(w, 'utf8') : w);

/**
 * The ACQUIRE (or ACQUIREALL) request of `args`, if the package's grammar makes exactly these
 * words: token, ttl, then `LABEL l`, `PERMITS n` (n above 1), `SHARED`, `BLOCK ms`, each at
 * most once and in that order. Anything else (a bad option, another order, a binary token) is
 * a request the package never builds.
 */
function acquireOf(args: readonly Buffer[], blockAllowed: boolean): { req: Omit<AcquireRequest, 'key'>; blockMs: number | undefined } | undefined {
  const token = args[0] === undefined ? undefined : text(args[0]);
  const ttlMs = integer(args[1]);
  if (token === undefined || ttlMs === undefined) return undefined;
  let i = 2;
  let label: Buffer | undefined;
  let permits: number | undefined;
  let shared = false;
  let blockMs: number | undefined;
  if (word(args[i], LABEL) && args[i + 1] !== undefined) {
    label = args[i + 1];
    i += 2;
  }
  if (word(args[i], PERMITS)) {
    permits = integer(args[i + 1]);
    if (permits === undefined || permits <= 1) return undefined;
    i += 2;
  }
  if (word(args[i], SHARED)) {
    shared = true;
    i += 1;
  }
  if (blockAllowed && word(args[i], BLOCK)) {
    blockMs = integer(args[i + 1]);
    if (blockMs === undefined) return undefined;
    i += 2;
  }
  if (i !== args.length) return undefined;
  return { req: { token, ttlMs, label, permits, shared }, blockMs };
}

/** How the managed side of an engine answers: the function's name, and the script's SHA1 as `SCRIPT LOAD` replied it. */
interface Served {
  readonly engine: Engine;
  readonly sha: string;
}

/** `FCALL fn numkeys keys… args…`, or `EVALSHA sha numkeys keys… fn args…` (the README's library forms). */
function libraryWords(served: Served, fn: string, keys: readonly Arg[], args: readonly Arg[]): Arg[] {
  if (served.engine === 'script') return ['EVALSHA', served.sha, String(keys.length), ...keys, fn, ...args];
  return ['FCALL', fn, String(keys.length), ...keys, ...args];
}

/** The wake-up list of `key` as bytes: the package's `wakeKey` takes only text keys. */
function wakeBytes(key: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`${WAKE_KEY_PREFIX}${floorTag(keySlot(key))}}:`), key]);
}

/**
 * The README's rule for a request, built here: for the shapes the package has no builder for
 * (the `key_only` and `none` key forms, keys that are not UTF-8 text: the package's keys are
 * strings, sent as UTF-8), and as a check of the package's words where it has one. The floor
 * key is the package's `floorKey` (which reads bytes), the wake-up list the package's prefix
 * and floor tag.
 */
function readmeWords(served: Served, call: string, form: KeyForm, key: Buffer, args: readonly Buffer[]): Arg[] {
  const member = (suffix: string): Buffer => Buffer.concat([key, Buffer.from(suffix, 'utf8')]);
  if (call === ACQUIRE_ALL) {
    assert.ok(form.form === 'set', `${call} takes the set key form, not ${form.form}`);
    const keys = form.suffixes.map(member);
    if (served.engine === 'module') return [ACQUIRE_ALL, String(keys.length), ...keys, ...args];
    const first = keys[0];
    return libraryWords(served, ACQUIRE_ALL_FUNCTION, first === undefined ? [] : [...keys, floorKey(first)], args);
  }
  const name = NAMES.get(call);
  assert.ok(name, `unknown command ${call}`);
  assert.ok(form.form !== 'set', `${call} does not take the set key form`);
  if (form.form === 'none') return served.engine === 'module' ? [call, ...args] : libraryWords(served, FUNCTIONS[name], [], args);
  const lock = form.form === 'member' ? member(form.suffix) : key;
  if (served.engine === 'module') return [call, lock, ...args];
  if (form.form === 'key_only') return libraryWords(served, FUNCTIONS[name], [lock], args);
  const keys: Buffer[] = [lock];
  if (takesFloor(name) || takesWake(name)) keys.push(Buffer.from(floorKey(lock)));
  if (takesWake(name)) keys.push(wakeBytes(lock));
  return libraryWords(served, FUNCTIONS[name], keys, args);
}

/** Which builder made a request (counted and printed at the end). */
type Via = 'acquireWords' | 'acquireAllWords' | 'request' | 'requestAll' | 'readme';

/**
 * A step's request for one server, by the package's builders where it has one for the shape
 * (and then it must be the README's words: a difference is a builder bug and fails the step).
 */
function build(served: Served, call: string, form: KeyForm, key: Buffer, args: readonly Buffer[]): { words: Arg[]; via: Via; mismatch?: string } {
  const readme = readmeWords(served, call, form, key, args);
  const keyText = text(key);
  const package_ = ((): { words: Arg[]; via: Via } | undefined => {
    if (keyText === undefined) return undefined;
    if (call === ACQUIRE_ALL && form.form === 'set') {
      const keys = form.suffixes.map((s) => keyText + s);
      const acquire = acquireOf(args, false);
      if (acquire) return { words: acquireAllWords(served.engine, keys, acquire.req), via: 'acquireAllWords' };
      return { words: requestAll(served.engine, keys, args), via: 'requestAll' };
    }
    const name = NAMES.get(call);
    // The module's key_only form is its with_floor form (the key, then the words).
    const keyed = form.form === 'with_floor' || form.form === 'member' || (form.form === 'key_only' && served.engine === 'module');
    if (name === undefined || !keyed) return undefined;
    const lock = form.form === 'member' ? keyText + form.suffix : keyText;
    if (name === 'acquire') {
      const acquire = acquireOf(args, true);
      if (acquire) return { words: acquireWords(served.engine, { key: lock, ...acquire.req }, false, acquire.blockMs), via: 'acquireWords' };
    }
    return { words: request(served.engine, name, lock, args), via: 'request' };
  })();
  if (!package_) return { words: readme, via: 'readme' };
  // EVALSHA names the SHA1 the package builds with (SCRIPT_SHA); the server's was checked to be it.
  const same = package_.words.length === readme.length && package_.words.every((w, i) => bytesOfArg(w).equals(bytesOfArg(readme[i] ?? '')));
  if (same) return package_;
  return { ...package_, mismatch: `the package's ${package_.via} built ${shown(package_.words)}, the README's rule ${shown(readme)}` };
}

function shown(words: readonly Arg[]): string {
  return words
    .map((w) => {
      const bytes = bytesOfArg(w);
      const t = text(bytes);
      if (bytes.length > 40) return `<${bytes.length} bytes>`;
      return t !== undefined && !/[\x00-\x1f\x7f]/.test(t) ? JSON.stringify(t) : `<hex ${bytes.toString('hex')}>`;
    })
    .join(' ');
}

// ---------------------------------------------------------------------------------------------
// Normalising replies (README, "Normalising a reply").

/** How far two pttls may differ (README: within 150 ms). */
const PTTL_TOLERANCE_MS = 150n;

type Norm =
  | { readonly k: 'error'; readonly text: string }
  | { readonly k: 'nil' }
  | { readonly k: 'int'; readonly v: bigint }
  /** The n-th distinct fence of the case, seen before. */
  | { readonly k: 'same'; readonly n: number }
  /** The n-th distinct fence, new, and whether it is above every earlier one. */
  | { readonly k: 'new'; readonly n: number; readonly above: boolean }
  | { readonly k: 'pttl'; readonly ms: bigint }
  | { readonly k: 'bytes'; readonly v: Buffer }
  | { readonly k: 'simple'; readonly v: string }
  | { readonly k: 'array'; readonly items: readonly Norm[] };

/** The fence's relation to those this server replied earlier in the case (which it joins). */
function relate(fences: bigint[], fence: bigint): Norm {
  const n = fences.indexOf(fence);
  if (n >= 0) return { k: 'same', n };
  const above = fences.every((f) => fence > f);
  fences.push(fence);
  return { k: 'new', n: fences.length - 1, above };
}

function plain(reply: Resp): Norm {
  switch (reply.type) {
    case 'nil':
      return { k: 'nil' };
    case 'int':
      return { k: 'int', v: reply.value };
    case 'bulk':
      return { k: 'bytes', v: reply.value };
    case 'simple':
      return { k: 'simple', v: reply.value };
    case 'error':
      return { k: 'error', text: reply.value };
    case 'array':
      return { k: 'array', items: reply.value.map(plain) };
  }
}

/** `[fence, held, pttl, label?]`, or a semaphore's `[fence, holders, permits, [[fence, pttl, label|nil]…]]`. */
function status(items: readonly Resp[], fences: bigint[]): Norm {
  const semaphore = items[3]?.type === 'array';
  return {
    k: 'array',
    items: items.map((item, i): Norm => {
      if (i === 0 && item.type === 'int') return relate(fences, item.value);
      if (i === 2 && !semaphore && item.type === 'int') return { k: 'pttl', ms: item.value };
      if (i === 3 && semaphore && item.type === 'array') {
        return {
          k: 'array',
          items: item.value.map((entry): Norm => {
            if (entry.type !== 'array') return plain(entry);
            return {
              k: 'array',
              items: entry.value.map((part, j): Norm => {
                if (j === 0 && part.type === 'int') return relate(fences, part.value);
                if (j === 1 && part.type === 'int') return { k: 'pttl', ms: part.value };
                return plain(part);
              }),
            };
          }),
        };
      }
      return plain(item);
    }),
  };
}

/** A reply as the contract sees it: ACQUIRE and RAISE reply a fence, ACQUIREALL fences, STATUS fences and pttls. */
function normalise(call: string, reply: Resp, fences: bigint[]): Norm {
  if (reply.type === 'int' && (call === COMMANDS.acquire || call === COMMANDS.raise)) return relate(fences, reply.value);
  if (reply.type === 'array' && call === ACQUIRE_ALL) return { k: 'array', items: reply.value.map((item) => (item.type === 'int' ? relate(fences, item.value) : plain(item))) };
  if (reply.type === 'array' && call === COMMANDS.status) return status(reply.value, fences);
  return plain(reply);
}

function agrees(a: Norm, b: Norm): boolean {
  switch (a.k) {
    case 'pttl':
      if (b.k !== 'pttl') return false;
      if (a.ms < 0n || b.ms < 0n) return a.ms === b.ms;
      return (a.ms > b.ms ? a.ms - b.ms : b.ms - a.ms) <= PTTL_TOLERANCE_MS;
    case 'array':
      return b.k === 'array' && a.items.length === b.items.length && a.items.every((x, i) => agrees(x, b.items[i] as Norm));
    case 'error':
      return b.k === 'error' && a.text === b.text;
    case 'nil':
      return b.k === 'nil';
    case 'int':
      return b.k === 'int' && a.v === b.v;
    case 'same':
      return b.k === 'same' && a.n === b.n;
    case 'new':
      return b.k === 'new' && a.n === b.n && a.above === b.above;
    case 'bytes':
      return b.k === 'bytes' && a.v.equals(b.v);
    case 'simple':
      return b.k === 'simple' && a.v === b.v;
  }
}

function show(n: Norm): string {
  switch (n.k) {
    case 'error':
      return `(error) ${n.text}`;
    case 'nil':
      return 'nil';
    case 'int':
      return String(n.v);
    case 'same':
      return `fence#${n.n}`;
    case 'new':
      return `fence#${n.n}(new, ${n.above ? 'above all' : 'NOT above all'})`;
    case 'pttl':
      return `pttl ${n.ms}`;
    case 'bytes':
      return shown([n.v]);
    case 'simple':
      return `+${n.v}`;
    case 'array':
      return `[${n.items.map(show).join(', ')}]`;
  }
}

/** One server's reply to one request, and whether it waited (steps with `block_ms`). */
interface Outcome {
  readonly reply: Norm;
  readonly waited: boolean | undefined;
}

const outcomesAgree = (a: Outcome, b: Outcome): boolean => a.waited === b.waited && agrees(a.reply, b.reply);

function showOutcome(o: Outcome): string {
  return `${show(o.reply)}${o.waited === undefined ? '' : o.waited ? ' (waited)' : ' (at once)'}`;
}

// ---------------------------------------------------------------------------------------------
// The expected differences (README, "Expected differences"): each checks its exact pair.

const FENCES_EXHAUSTED = ERROR_TEXTS.get('FencesExhausted');

const EXPECTED: Record<string, (module: Outcome, library: Outcome) => boolean> = {
  // The module raises above 2^53; the library replies the module's FencesExhausted text.
  'raise:above-2^53': (module, library) => module.reply.k === 'new' && module.reply.above && library.reply.k === 'error' && library.reply.text === FENCES_EXHAUSTED,
  // The module replies nil after waiting; the library replies nil at once.
  'block:busy-key': (module, library) => module.reply.k === 'nil' && module.waited === true && library.reply.k === 'nil' && library.waited === false,
};

// ---------------------------------------------------------------------------------------------
// The run.

interface Server {
  readonly name: 'module' | 'functions' | 'script';
  readonly setup: Setup;
  readonly engine: Engine;
  server?: TestServer;
  conn?: ExactConnection;
  sha: string;
}

const SERVERS: Server[] = [
  { name: 'module', setup: 'module', engine: 'module', sha: '' },
  { name: 'functions', setup: 'managed', engine: 'functions', sha: '' },
  { name: 'script', setup: 'managed-no-function', engine: 'script', sha: '' },
];

const counts = { cases: 0, steps: 0, requests: 0, via: new Map<string, number>() };

function connection(s: Server): ExactConnection {
  assert.ok(s.conn, `the ${s.name} server is not up`);
  return s.conn;
}

/** Runs one case on the three servers; the failures, each naming the case, step, request and both replies. */
async function runCase(c: Case): Promise<string[]> {
  const key = bytesOf(c.key, `${c.name}: key`);
  const fences = new Map<Server, bigint[]>(SERVERS.map((s) => [s, []]));
  const listed = new Map(CORPUS.differences.filter((d) => d.case === c.name).map((d) => [d.step, d]));
  const failures: string[] = [];
  for (const [i, raw] of c.steps.entries()) {
    const at = `${c.name} step ${i}`;
    const step = stepOf(raw, at);
    counts.steps++;
    if (step.kind === 'sleep') {
      await sleep(step.ms);
      continue;
    }
    if (step.kind === 'raw') {
      for (const s of SERVERS) {
        const words = step.words.map((w, j) => resolveWord(w, key, fences.get(s) ?? [], `${at} word ${j}`));
        const reply = await connection(s).send(words);
        assert.ok(reply.type !== 'error', `${at}: set-up ${shown(words)} failed on the ${s.name} server: ${reply.type === 'error' ? reply.value : ''}`);
      }
      continue;
    }
    const outcomes: Outcome[] = [];
    const requests: string[] = [];
    for (const s of SERVERS) {
      const seen = fences.get(s) ?? [];
      const args = step.args.map((w, j) => resolveWord(w, key, seen, `${at} arg ${j}`));
      if (step.blockMs !== undefined) {
        assert.ok(args.some((a, j) => word(a, BLOCK) && word(args[j + 1], String(step.blockMs))), `${at}: block_ms ${step.blockMs} without BLOCK ${step.blockMs} among the args`);
      }
      const built = build({ engine: s.engine, sha: s.sha }, step.call, step.keys, key, args);
      if (built.mismatch) failures.push(`${at} (${s.name}): ${built.mismatch}`);
      counts.requests++;
      counts.via.set(built.via, (counts.via.get(built.via) ?? 0) + 1);
      requests.push(shown(built.words));
      const started = performance.now();
      const reply = await connection(s).send(built.words);
      const took = performance.now() - started;
      const waited = step.blockMs === undefined ? undefined : took >= (step.blockMs * 3) / 4;
      outcomes.push({ reply: normalise(step.call, reply, seen), waited });
    }
    const module = outcomes[0] as Outcome;
    for (const [j, s] of SERVERS.entries()) {
      if (j === 0) continue;
      const library = outcomes[j] as Outcome;
      const agree = outcomesAgree(module, library);
      const report = (what: string): string =>
        `${at}: ${what}\n    request:   ${requests[0]} (keys ${JSON.stringify(raw['keys'])})\n    ${s.name} request: ${requests[j]}\n    module:    ${showOutcome(module)}\n    ${`${s.name}:`.padEnd(10)} ${showOutcome(library)}`;
      const difference = listed.get(i);
      if (difference) {
        const matches = EXPECTED[c.name];
        assert.ok(matches, `${at}: the corpus lists a difference this runner does not know: ${difference.why}`);
        if (agree) failures.push(report(`the listed difference did not show (${s.name} agrees with the module)`));
        else if (!matches(module, library)) failures.push(report(`the ${s.name} server differs otherwise than listed`));
      } else if (!agree) {
        failures.push(report(`the ${s.name} server disagrees with the module`));
      }
    }
  }
  counts.cases++;
  return failures;
}

describe('the command contract corpus (protocol/corpus/conformance.json): module vs FCALL vs EVALSHA', () => {
  let started = 0;

  before(async () => {
    started = performance.now();
    for (const s of SERVERS) {
      s.server = await TestServer.start({ setup: s.setup });
      s.conn = await ExactConnection.open(s.server.port);
    }
    const [, functions, script] = SERVERS as [Server, Server, Server];
    // The library the package carries, loaded by the default (application) user.
    const loaded = await connection(functions).send(['FUNCTION', 'LOAD', 'REPLACE', LIBRARY]);
    assert.deepEqual(loaded, { type: 'bulk', value: Buffer.from(LIBRARY_NAME) }, 'FUNCTION LOAD by the default user');
    // FUNCTION is denied there: the package's script, loaded by the default user.
    const denied = await connection(script).send(['FUNCTION', 'LIST']);
    assert.equal(denied.type, 'error', 'FUNCTION is denied on the script server');
    const sha = await connection(script).send(['SCRIPT', 'LOAD', SCRIPT]);
    assert.ok(sha.type === 'bulk', `SCRIPT LOAD by the default user: ${JSON.stringify(sha)}`);
    script.sha = sha.value.toString('latin1');
    assert.equal(script.sha, SCRIPT_SHA, 'the package builds EVALSHA with the SHA1 of the script it carries');
  });

  after(async () => {
    for (const s of SERVERS) {
      s.conn?.close();
      await s.server?.stop();
    }
    const via = [...counts.via].map(([k, n]) => `${k} ${n}`).join(', ');
    console.log(
      `conformance corpus: ${counts.cases} cases, ${counts.steps} steps, ${counts.requests} requests on ${SERVERS.map((s) => s.name).join(' / ')} (${SERVERS[0]?.server?.spec.flavor}); built by ${via}; in ${Math.round(performance.now() - started)} ms`,
    );
  });

  test('the corpus is one this runner knows', () => {
    assert.equal(CORPUS.schema, 1, 'schema');
    const names = new Set(CORPUS.cases.map((c) => c.name));
    assert.equal(names.size, CORPUS.cases.length, 'case names are unique');
    const keys = new Set(CORPUS.cases.map((c) => bytesOf(c.key, c.name).toString('hex')));
    assert.equal(keys.size, CORPUS.cases.length, 'each case has its own key (the servers are shared)');
    for (const c of CORPUS.cases) for (const [i, raw] of c.steps.entries()) stepOf(raw, `${c.name} step ${i}`);
    // Every listed difference is one this runner checks exactly, at a call step of its case, and none is left over.
    assert.deepEqual(CORPUS.differences.map((d) => d.case).sort(), Object.keys(EXPECTED).sort(), 'the expected differences');
    for (const d of CORPUS.differences) {
      const step = CORPUS.cases.find((c) => c.name === d.case)?.steps[d.step];
      assert.ok(step && 'call' in step, `${d.case} step ${d.step}: a listed difference names a call step`);
    }
    assert.ok(FENCES_EXHAUSTED, 'contract.json has the FencesExhausted text');
  });

  for (const c of CORPUS.cases) {
    test(c.name, async () => {
      const failures = await runCase(c);
      assert.equal(failures.length, 0, `${failures.length} disagreement(s):\n${failures.join('\n')}`);
    });
  }
});
