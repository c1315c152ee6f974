// The Node benchmarks' servers on 127.0.0.1: a free port to start one on, and the wait until
// it listens.
import { connect, createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** The first port from `from` (up to 100 further) that nothing listens on. */
export async function freePort(from) {
  for (let p = from; p < from + 100; p++) {
    const ok = await new Promise((resolve) => {
      const probe = createServer();
      probe.once('error', () => resolve(false));
      probe.listen(p, '127.0.0.1', () => probe.close(() => resolve(true)));
    });
    if (ok) return p;
  }
  throw new Error('no free port');
}

/** Waits up to 5 s for a server to listen on port `p`. */
export async function waitFor(p) {
  for (let i = 0; i < 250; i++) {
    const up = await new Promise((resolve) => {
      const s = connect(p, '127.0.0.1', () => { s.destroy(); resolve(true); });
      s.once('error', () => resolve(false));
    });
    if (up) return;
    await sleep(20);
  }
  throw new Error(`redis-server did not listen on ${p}`);
}
