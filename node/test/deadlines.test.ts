/**
 * `Deadlines`, the per-request timeout of a server's shared connection with one timer for all
 * of its requests: a request still open at its deadline is expired (not before), in the order
 * sent; an answered one never is; the timer holds the process open only while a request is in
 * flight. (The timeout against a stopped server, end to end: multi.test.ts, unanswered.test.ts.)
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Deadlines } from '../src/deadlines.js';

/** Timers that hold the process open (an unreferenced one is not listed). */
const heldTimers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

test('an open request expires at its deadline, in the order sent; an answered one never', async () => {
  const deadlines = new Deadlines(200);
  const expired: string[] = [];
  const at: number[] = [];
  const started = performance.now();
  const first = deadlines.add(() => (expired.push('first'), at.push(performance.now() - started)));
  const answered = deadlines.add(() => expired.push('answered'));
  await sleep(100);
  const later = deadlines.add(() => (expired.push('later'), at.push(performance.now() - started)));
  assert.equal(deadlines.settle(answered), true, 'answered in time');
  await sleep(150);
  assert.deepEqual(expired, ['first'], 'the first at its deadline, the later not yet');
  assert.ok((at[0] ?? 0) >= 199, `not before its 200 ms (${at[0]})`);
  await sleep(150);
  assert.deepEqual(expired, ['first', 'later']);
  assert.ok((at[1] ?? 0) >= 299, `the later at its own deadline (${at[1]})`);
  assert.equal(deadlines.settle(first), false, 'an answer after the expiry comes too late');
  assert.equal(deadlines.settle(later), false);
});

test('the one timer holds the process open only while a request is in flight', async () => {
  const deadlines = new Deadlines(200);
  const before = heldTimers();
  const pending = deadlines.add(() => assert.fail('answered in time'));
  assert.equal(heldTimers(), before + 1, 'a request in flight keeps the process alive');
  assert.equal(deadlines.settle(pending), true);
  assert.equal(heldTimers(), before, 'an idle server holds nothing open');
  const again = deadlines.add(() => assert.fail('answered in time'));
  assert.equal(heldTimers(), before + 1, 'the timer left armed is held again');
  deadlines.settle(again);
  await sleep(250); // the timer fires with nothing open and is not armed again
  assert.equal(heldTimers(), before);
});
