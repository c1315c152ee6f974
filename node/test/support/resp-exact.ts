/**
 * One RESP2 connection that reads each reply exactly as the server sent it, its type kept:
 * integers as `bigint` (fences exceed 2^53), bulk strings as bytes, simple strings, errors
 * (their full text) and nil apart. The clients under test fold some of these together (ioredis
 * and node-redis give a simple string and a bulk string alike, and an integer as a JS number
 * unless told to make it a string, which a bulk string may also be), so a runner that compares
 * replies byte for byte reads them here. Requests go one at a time.
 */
import { connect, type Socket } from 'node:net';

export type Resp =
  | { readonly type: 'nil' }
  | { readonly type: 'int'; readonly value: bigint }
  | { readonly type: 'bulk'; readonly value: Buffer }
  | { readonly type: 'simple'; readonly value: string }
  | { readonly type: 'error'; readonly value: string }
  | { readonly type: 'array'; readonly value: readonly Resp[] };

const CRLF = Buffer.from('\r\n');

function encode(args: readonly (string | Buffer)[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
  for (const arg of args) {
    const bytes = typeof arg === 'string' ? Buffer.from(arg, 'utf8') : arg;
    parts.push(Buffer.from(`$${bytes.length}\r\n`), bytes, CRLF);
  }
  return Buffer.concat(parts);
}

/** One reply at `at`, and where the next begins; undefined while incomplete. */
function parse(buf: Buffer, at: number): [Resp, number] | undefined {
  const end = buf.indexOf(CRLF, at);
  if (end < 0) return undefined;
  // latin1: one char per byte, so two lines are equal only when their bytes are.
  const line = buf.toString('latin1', at + 1, end);
  const next = end + 2;
  switch (String.fromCharCode(buf[at] ?? 0)) {
    case '+':
      return [{ type: 'simple', value: line }, next];
    case '-':
      return [{ type: 'error', value: line }, next];
    case ':':
      return [{ type: 'int', value: BigInt(line) }, next];
    case '$': {
      const n = Number(line);
      if (n < 0) return [{ type: 'nil' }, next];
      if (buf.length < next + n + 2) return undefined;
      return [{ type: 'bulk', value: Buffer.from(buf.subarray(next, next + n)) }, next + n + 2];
    }
    case '*': {
      const n = Number(line);
      if (n < 0) return [{ type: 'nil' }, next];
      const items: Resp[] = [];
      let pos = next;
      for (let i = 0; i < n; i++) {
        const item = parse(buf, pos);
        if (!item) return undefined;
        items.push(item[0]);
        pos = item[1];
      }
      return [{ type: 'array', value: items }, pos];
    }
    default:
      throw new Error(`not RESP2 at byte ${at}: ${JSON.stringify(buf.toString('latin1', at, at + 16))}`);
  }
}

interface Pending {
  readonly resolve: (reply: Resp) => void;
  readonly reject: (err: Error) => void;
}

/** A connection as the default user (no AUTH): the application's user of a managed server. */
export class ExactConnection {
  #buf: Buffer = Buffer.alloc(0);
  #pending: Pending | undefined;
  #failed: Error | undefined;

  private constructor(private readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => this.#data(chunk));
    socket.on('error', (err) => this.#fail(err));
    socket.on('close', () => this.#fail(new Error('connection closed')));
  }

  static open(port: number): Promise<ExactConnection> {
    return new Promise((resolve, reject) => {
      const socket = connect(port, '127.0.0.1');
      socket.setNoDelay(true);
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.off('error', reject);
        resolve(new ExactConnection(socket));
      });
    });
  }

  #data(chunk: Buffer): void {
    this.#buf = this.#buf.length === 0 ? chunk : Buffer.concat([this.#buf, chunk]);
    let got: [Resp, number] | undefined;
    try {
      got = parse(this.#buf, 0);
    } catch (err) {
      this.#fail(err as Error);
      return;
    }
    if (!got) return;
    const pending = this.#pending;
    this.#pending = undefined;
    this.#buf = this.#buf.subarray(got[1]);
    if (!pending) this.#fail(new Error('a reply nobody asked for'));
    else if (this.#buf.length > 0) this.#fail(new Error('more than one reply to one request'));
    else pending.resolve(got[0]);
  }

  #fail(err: Error): void {
    this.#failed ??= err;
    const pending = this.#pending;
    this.#pending = undefined;
    pending?.reject(err);
    this.socket.destroy();
  }

  /** Sends one command and reads its one reply (an error reply is a reply, not a rejection). */
  send(args: readonly (string | Buffer)[], timeoutMs = 10_000): Promise<Resp> {
    if (this.#failed) return Promise.reject(this.#failed);
    if (this.#pending) return Promise.reject(new Error('one request at a time'));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => this.#fail(new Error(`no reply within ${timeoutMs} ms`)), timeoutMs);
      this.#pending = {
        resolve: (reply) => {
          clearTimeout(timer);
          resolve(reply);
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      };
      this.socket.write(encode(args));
    });
  }

  close(): void {
    this.#failed ??= new Error('closed');
    this.socket.destroy();
  }
}
