/**
 * A minimal RESP2 client for the tests' own commands (admin work, and reading replies as the
 * server sent them, integers as their exact decimal text), independent of the clients under test.
 */
import { connect } from 'node:net';

export type RawReply = null | string | RawReply[] | Error;

function encode(args: readonly (string | Buffer)[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
  for (const arg of args) {
    const bytes = typeof arg === 'string' ? Buffer.from(arg) : arg;
    parts.push(Buffer.from(`$${bytes.length}\r\n`), bytes, Buffer.from('\r\n'));
  }
  return Buffer.concat(parts);
}

/** Parses one reply at `at`; undefined while incomplete. Integers stay text. */
function parse(buf: Buffer, at: number): [RawReply, number] | undefined {
  const end = buf.indexOf('\r\n', at);
  if (end < 0) return undefined;
  const line = buf.toString('latin1', at + 1, end);
  switch (String.fromCharCode(buf[at] ?? 0)) {
    case '+': case ':': return [line, end + 2];
    case '-': return [new Error(line), end + 2];
    case '$': {
      const n = Number(line);
      if (n < 0) return [null, end + 2];
      if (buf.length < end + 2 + n + 2) return undefined;
      return [buf.toString('latin1', end + 2, end + 2 + n), end + 4 + n];
    }
    case '*': {
      const n = Number(line);
      if (n < 0) return [null, end + 2];
      const items: RawReply[] = [];
      let pos = end + 2;
      for (let i = 0; i < n; i++) {
        const item = parse(buf, pos);
        if (!item) return undefined;
        items.push(item[0]);
        pos = item[1];
      }
      return [items, pos];
    }
    default: throw new Error(`bad RESP at ${at}`);
  }
}

/** One command on a new connection (after AUTH when given); error replies come back as `Error`s. */
export function command(port: number, args: readonly (string | Buffer)[], auth?: { user: string; password: string }, timeoutMs = 10_000): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    const expected = auth ? 2 : 1;
    const replies: RawReply[] = [];
    const timer = setTimeout(() => { socket.destroy(); reject(new Error(`no reply to ${String(args[0])} within ${timeoutMs} ms`)); }, timeoutMs);
    socket.on('error', (err) => { clearTimeout(timer); reject(err); });
    socket.on('close', () => { clearTimeout(timer); if (replies.length < expected) reject(new Error('connection closed')); });
    socket.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      let at = 0;
      for (let got = parse(buf, at); got; got = parse(buf, at)) {
        replies.push(got[0]);
        at = got[1];
      }
      buf = buf.subarray(at);
      if (replies.length >= expected) {
        clearTimeout(timer);
        socket.destroy();
        const last = replies[expected - 1] ?? null;
        resolve(last);
      }
    });
    socket.write(Buffer.concat([...(auth ? [encode(['AUTH', auth.user, auth.password])] : []), encode(args)]));
  });
}
