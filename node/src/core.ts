/**
 * The one lease algorithm every locker runs, on one server (N = 1) or by majority of N
 * independent masters (Redlock), after the Rust client's `acquisition/rounds.rs`: send to every server in
 * parallel, each bounded by the timeout; stop as soon as the outcome is certain; charge the
 * time the round took against the lease (`validity = ttl - elapsed - drift`, elapsed measured
 * from before the first request). Fenced Redlock raises every granting master's fence to the
 * quorum's maximum (owner-checked; a master that granted that maximum needs none) before the
 * lease is handed out.
 */
import type { AcquireRequest } from './acquire-request.js';
import { ContendedError, FencedLockError, QuorumNotReachedError, ServerError, type Vote } from './errors.js';
import { answered, causeOf } from './failures.js';
import { drift, type Settings } from './options.js';
import type { Server } from './server.js';

/** A successful acquisition: the fence and the validity deadline (`performance.now()` ms). */
export interface Grant {
  readonly fence: bigint;
  readonly validUntil: number;
}

/** A grant and the token it was granted to (the lease's). */
export interface Won extends Grant {
  readonly token: string;
}

/** Votes needed: a strict majority. */
export function quorum(n: number): number {
  return Math.floor(n / 2) + 1;
}

/** Runs `requests` in parallel until `decided` says the outcome is certain; the rest are 'not-awaited'. */
async function untilDecided<T>(requests: readonly (() => Promise<T>)[], decided: (answers: readonly (T | undefined)[]) => boolean): Promise<(T | undefined)[]> {
  const answers: (T | undefined)[] = requests.map(() => undefined);
  if (requests.length === 0) return answers;
  return new Promise((resolve) => {
    let pending = requests.length;
    let done = false;
    requests.forEach((request, i) => {
      void request().then((answer) => {
        answers[i] = answer;
        pending--;
        if (!done && (pending === 0 || decided(answers))) {
          done = true;
          resolve(answers.slice());
        }
      });
    });
  });
}

/** Whether a failed request may have been carried out without our hearing of it. */
export function mayHold(err: unknown): boolean {
  return err instanceof ServerError ? err.code === undefined : !answered(err);
}

function asFailure(server: Server, err: unknown, secret?: string): FencedLockError {
  const e = server.error(err, secret);
  return e instanceof FencedLockError ? e : new ServerError(server.name, causeOf(err), String(e));
}

/** What a grant is made into for the caller (a `Lease`, a `Won`), on the attempt's own promise. */
export type Make<T> = (fence: bigint, validUntil: number, token: string) => T;

const asWon: Make<Won> = (fence, validUntil, token) => ({ fence, validUntil, token });

/** The shared state of a locker: its servers, options and fencing. */
export class Core {
  readonly quorum: number;
  /** The server of a locker of one (a `Locker`, a Redlock of one master): the lease path's shortcut. */
  readonly #only: Server | undefined;

  constructor(readonly servers: readonly Server[], readonly settings: Settings, readonly raise: boolean) {
    this.quorum = quorum(servers.length);
    this.#only = servers.length === 1 ? servers[0] : undefined;
  }

  /** The deadline of a lease granted for `ttl` to requests sent at `sent`. */
  deadline(sent: number, ttl: number): number {
    return sent + ttl - drift(this.settings, ttl);
  }

  /** One acquisition round: the grant (to `req`'s token), or null when another owner holds the lock. */
  attempt(req: AcquireRequest): Promise<Won | null> {
    const only = this.#only;
    if (only?.engine !== undefined) return this.#attemptOne(only, req, asWon);
    return this.#attemptDetecting(req);
  }

  /** `attempt`, its grant made into `make`'s value. */
  attemptAs<T>(req: AcquireRequest, make: Make<T>): Promise<T | null> {
    const only = this.#only;
    // One server whose engine is known (every lease after the first): one promise on the request's.
    if (only?.engine !== undefined) return this.#attemptOne(only, req, make);
    return this.#attemptDetecting(req).then((won) => (won === null ? null : make(won.fence, won.validUntil, won.token)));
  }

  #attemptOne<T>(only: Server, req: AcquireRequest, make: Make<T>): Promise<T | null> {
    const sent = performance.now();
    return only.acquire(req).then(
      (fence) => {
        if (fence === null) return null;
        const validUntil = this.deadline(sent, req.ttlMs);
        if (performance.now() >= validUntil) {
          this.releaseInBackground(req.key, req.token);
          throw new ServerError(only.name, 'TimedOut', 'the grant took longer than the lease', undefined);
        }
        return make(fence, validUntil, req.token);
      },
      (err: unknown) => {
        // Without an answer the server may have granted: give it back in the background.
        if (mayHold(err)) this.releaseInBackground(req.key, req.token);
        throw err;
      },
    );
  }

  async #attemptDetecting(req: AcquireRequest): Promise<Won | null> {
    // Engine detection (the first request to a server) is not part of the grant's round.
    if (this.servers.some((server) => server.engine === undefined)) {
      await Promise.all(this.servers.map((server) => server.detect().catch(() => undefined)));
    }
    const only = this.#only;
    if (only) return this.#attemptOne(only, req, asWon);
    const sent = performance.now();
    const votes = await this.#round(
      (server) => server.acquire(req).then((fence): Vote => (fence === null ? { vote: 'refused' } : { vote: 'granted', fence })),
      req.token,
    );
    const granted = votes.filter((v): v is Extract<Vote, { vote: 'granted' }> => v.vote === 'granted');
    if (granted.length >= this.quorum) {
      let fence = granted.reduce((max, v) => (v.fence > max ? v.fence : max), 0n);
      let ok = true;
      if (this.raise) ok = await this.#raise(req, votes, fence);
      const validUntil = this.deadline(sent, req.ttlMs);
      if (ok && performance.now() < validUntil) return { fence, validUntil, token: req.token };
      fence = 0n;
    }
    // No usable majority: give back what may be ours (a refusing master holds nothing of ours).
    await this.#giveBack(req, votes);
    // Any refusal: another owner holds the lock (fail-open must never override that).
    if (votes.some((v) => v.vote === 'refused')) return null;
    throw new QuorumNotReachedError(req.key, votes, this.quorum);
  }

  /** Every server's answer to `ask`, stopping once a majority said yes or can no longer. */
  async #round(ask: (server: Server) => Promise<Vote>, secret: string): Promise<Vote[]> {
    const n = this.servers.length;
    const answers = await untilDecided(
      this.servers.map((server) => () => ask(server).catch((err: unknown): Vote => ({ vote: 'failed', error: asFailure(server, err, secret) }))),
      (answers) => {
        const yes = answers.filter((a) => a?.vote === 'granted').length;
        const no = answers.filter((a) => a !== undefined && a.vote !== 'granted').length;
        return yes >= this.quorum || n - no < this.quorum;
      },
    );
    return answers.map((a) => a ?? { vote: 'not-awaited' });
  }

  /**
   * Fenced Redlock's raise step: every granting master below `fence` raised to it; true once a
   * majority holds it. A master whose grant carried `fence` is not asked: it issued that fence
   * to our token, which is what a RAISE reply would confirm, so on a key leased again and again
   * (one raise leaves every master at the same fence) most leases need no raise.
   */
  async #raise(req: AcquireRequest, votes: readonly Vote[], fence: bigint): Promise<boolean> {
    const atFence = votes.filter((v) => v.vote === 'granted' && v.fence === fence).length;
    if (atFence >= this.quorum) return true;
    const below = this.servers.filter((_, i) => {
      const v = votes[i];
      return v?.vote === 'granted' && v.fence < fence;
    });
    const results = await Promise.all(below.map((server) => server.raise(req.key, req.token, fence).catch(() => null)));
    return atFence + results.filter((raised) => raised !== null && raised >= fence).length >= this.quorum;
  }

  async #giveBack(req: AcquireRequest, votes: readonly Vote[]): Promise<void> {
    await Promise.all(
      this.servers.map(async (server, i) => {
        const vote = votes[i];
        if (vote?.vote === 'refused') return;
        if (vote?.vote === 'granted') {
          await server.release(req.key, req.token).catch(() => undefined);
        } else {
          this.releaseOn(server, req.key, req.token);
        }
      }),
    );
  }

  /**
   * A release whose answer nobody waits for (a lease it misses expires after its ttl). The
   * token is given up: no lease is handed out for it afterwards (`take` retries with a new one).
   */
  releaseOn(server: Server, key: string, token: string): void {
    void server.release(key, token).catch(() => undefined);
  }

  releaseInBackground(key: string, token: string): void {
    for (const server of this.servers) this.releaseOn(server, key, token);
  }

  /**
   * The releases after an abandoned waiting request: at once, and again one timeout later.
   * The request's connection is closed, but the release travels on another one and may reach
   * the server first; a handoff to the waiter in between is ended only by the second. Neither
   * is ordered before any later request, so `token` must never be asked with again (`take`
   * retries with a new one): a grant to it would be ended by them.
   */
  releaseAfterWait(server: Server, key: string, token: string): void {
    this.releaseOn(server, key, token);
    setTimeout(() => this.releaseOn(server, key, token), this.settings.timeout).unref();
  }

  /** RENEW everywhere: the new deadline, null when a majority no longer holds it. */
  async renew(key: string, token: string, ttl: number): Promise<number | null> {
    const sent = performance.now();
    if (this.#only) return (await this.#only.renew(key, token, ttl)) ? this.deadline(sent, ttl) : null;
    const votes = await this.#round((server) => server.renew(key, token, ttl).then((held): Vote => (held ? { vote: 'granted', fence: 0n } : { vote: 'refused' })), token);
    const yes = votes.filter((v) => v.vote === 'granted').length;
    if (yes >= this.quorum && performance.now() < this.deadline(sent, ttl)) return this.deadline(sent, ttl);
    if (votes.filter((v) => v.vote === 'refused').length > this.servers.length - this.quorum) return null;
    throw new QuorumNotReachedError(key, votes, this.quorum);
  }

  /**
   * RELEASE everywhere: whether a majority still held it. Returns once a majority's answer is
   * known; the releases to masters that had not answered go on in the background.
   */
  release(key: string, token: string): Promise<boolean> {
    const only = this.#only;
    if (only) return only.release(key, token);
    return this.#releaseAll(key, token);
  }

  async #releaseAll(key: string, token: string): Promise<boolean> {
    const answers = await untilDecided(
      this.servers.map((server) => () =>
        server.release(key, token).then(
          (held): Vote => (held ? { vote: 'granted', fence: 0n } : { vote: 'refused' }),
          (err: unknown): Vote => ({ vote: 'failed', error: asFailure(server, err, token) }),
        ),
      ),
      (answers) => {
        const yes = answers.filter((a) => a?.vote === 'granted').length;
        const no = answers.filter((a) => a?.vote === 'refused').length;
        const open = answers.filter((a) => a === undefined).length;
        return yes >= this.quorum || no >= this.quorum || (yes + open < this.quorum && no + open < this.quorum);
      },
    );
    const votes: Vote[] = answers.map((a) => a ?? { vote: 'not-awaited' });
    const yes = votes.filter((v) => v.vote === 'granted').length;
    const no = votes.filter((v) => v.vote === 'refused').length;
    if (yes >= this.quorum) return true;
    if (no >= this.quorum) return false;
    throw new QuorumNotReachedError(key, votes, this.quorum);
  }

  /** The error of a wait that ran out. */
  contended(key: string): ContendedError {
    return new ContendedError(key);
  }
}
