/**
 * Real servers for the tests: Redis 7.0 (Debian's), Redis 7.4 and Valkey 9.1 (installed by
 * scripts/setup), with the module or without it as a managed service would run them. Each
 * server runs in a temp dir of its own on 127.0.0.1, on a port of 24000-26999 (the Rust and
 * Python suites use others), and is stopped at the end. A server that cannot start fails the
 * test with the reason: nothing is skipped.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { command, type RawReply } from './resp.js';

/** The repository's root: the nearest directory above with the protocol crate in it. */
function findRepo(): string {
  for (let dir = import.meta.dirname; dir !== '/'; dir = resolve(dir, '..')) {
    if (existsSync(join(dir, 'protocol/src/functions.lua'))) return dir;
  }
  throw new Error(`no fencedlock checkout above ${import.meta.dirname}`);
}

export const REPO = findRepo();

export type Flavor = 'redis70' | 'redis74' | 'valkey';
export const FLAVORS: readonly Flavor[] = ['redis70', 'redis74', 'valkey'];

/** How the server serves the contract: the module, or a managed service without it. */
export type Setup = 'module' | 'managed' | 'managed-no-function' | 'managed-no-scripts';

const BINARIES: Record<Flavor, string> = {
  redis70: 'redis-server',
  redis74: join(REPO, '.cache/redis74/redis-server'),
  valkey: join(REPO, '.cache/valkey/valkey-server'),
};

export const MODULE = process.env['FENCEDLOCK_MODULE'] ?? join(REPO, 'target/release/libfencedlock_module.so');

/** The admin user of a managed server: the test's own CONFIG, DEBUG and SHUTDOWN. */
export const ADMIN = { user: 'admin', password: 'admin-secret' };

let nextPort = 24000 + (process.pid % 30) * 100;

/** Every server process still running: killed when the test process exits, however it ends. */
const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(128 + (signal === 'SIGINT' ? 2 : 15)));

async function free(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const probe = createServer();
    probe.once('error', () => ok(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => ok(true)));
  });
}

/** A port of 24000-26999 nobody listens on. */
export async function port(): Promise<number> {
  for (let tries = 0; tries < 3000; tries++) {
    const p = nextPort;
    nextPort = nextPort >= 26990 ? 24000 : nextPort + 1;
    if (await free(p)) return p;
  }
  throw new Error('no free port in 24000-26999');
}

export interface ServerSpec {
  readonly flavor?: Flavor;
  readonly setup?: Setup;
  readonly args?: readonly string[];
}

export class TestServer {
  #child: ChildProcess | undefined;
  readonly dir: string;

  private constructor(public spec: Required<ServerSpec>, readonly port: number) {
    this.dir = mkdtempSync(join(tmpdir(), 'fencedlock-node-'));
  }

  static async start(spec: ServerSpec = {}): Promise<TestServer> {
    let args = spec.args ?? [];
    // A cluster node's bus would listen at port + 10000, inside the kernel's ephemeral range
    // (an outgoing connection may hold it): it gets a port of the test range of its own.
    if (args.includes('--cluster-enabled')) args = [...args, '--cluster-port', String(await port())];
    const full = { flavor: spec.flavor ?? 'redis70', setup: spec.setup ?? 'module', args };
    const server = new TestServer(full, await port());
    await server.launch();
    return server;
  }

  get binary(): string {
    return BINARIES[this.spec.flavor];
  }

  #args(): string[] {
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir, '--save', '', '--appendonly', 'no', '--enable-debug-command', 'yes', '--repl-diskless-sync', 'no', '--daemonize', 'no', '--logfile', join(this.dir, 'server.log')];
    if (this.spec.setup === 'module') args.push('--loadmodule', MODULE);
    else {
      const deny = { 'managed-no-function': ' -function', 'managed-no-scripts': ' -function -script -evalsha', managed: '' }[this.spec.setup];
      args.push('--user', ...`default on nopass ~* &* +@all -module -config -debug${deny}`.split(' '));
      args.push('--user', ...`${ADMIN.user} on >${ADMIN.password} ~* &* +@all`.split(' '));
    }
    return [...args, ...this.spec.args];
  }

  /** Starts (or restarts) the process on the same port and directory. */
  async launch(): Promise<void> {
    if (this.spec.setup === 'module' && !existsSync(MODULE)) throw new Error(`the module is not built: ${MODULE} (cargo build --release -p fencedlock-module)`);
    const child = spawn(this.binary, this.#args(), { stdio: 'ignore' });
    this.#child = child;
    running.add(child);
    child.once('exit', () => running.delete(child));
    let failed: Error | undefined;
    child.once('error', (err) => (failed = new Error(`cannot start ${this.binary}: ${err.message} (run scripts/setup)`)));
    const deadline = Date.now() + 10_000;
    for (;;) {
      if (failed) throw failed;
      if (child.exitCode !== null) throw new Error(`${this.binary} exited with ${child.exitCode} on port ${this.port}; see ${this.dir}/server.log`);
      try {
        const pong = await this.admin(['PING']);
        if (String(pong) === 'PONG') return;
      } catch {
        // not up yet
      }
      if (Date.now() > deadline) throw new Error(`${this.binary} did not answer on port ${this.port} within 10 s`);
      await sleep(20);
    }
  }

  /** A command as the admin (managed servers) or the default user, on a connection of its own. */
  admin(args: readonly (string | Buffer)[]): Promise<RawReply> {
    const auth = this.spec.setup === 'module' ? undefined : ADMIN;
    return command(this.port, args, auth);
  }

  /** A command as the default (application) user. */
  raw(args: readonly (string | Buffer)[]): Promise<RawReply> {
    return command(this.port, args);
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  signal(sig: NodeJS.Signals): void {
    this.#child?.kill(sig);
  }

  /** Stops the process (SIGKILL) and waits for it to exit. */
  async kill(): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((ok) => child.once('exit', ok));
    child.kill('SIGKILL');
    await exited;
  }

  /** Restarts the process after `SHUTDOWN` (saving what its persistence settings say). */
  async restart(): Promise<void> {
    const child = this.#child;
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((ok) => child.once('exit', ok));
      await this.admin(['SHUTDOWN']).catch(() => undefined);
      await exited;
    }
    await this.launch();
  }

  /** Kills the process and starts it again on the same port without the module and without
   *  data, as a managed service: the server a module server becomes when its module is lost. */
  async restartWithoutModule(): Promise<void> {
    await this.kill();
    this.spec = { ...this.spec, setup: 'managed' };
    await this.launch();
  }

  async stop(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** `INFO commandstats` as calls per command, the names lower-cased (Redis 7.0 shows module commands upper-case). */
export async function commandCalls(server: TestServer): Promise<Map<string, number>> {
  const info = String(await server.admin(['INFO', 'commandstats']));
  const calls = new Map<string, number>();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set((m[1] ?? '').toLowerCase(), Number(m[2]));
  return calls;
}

/** `name`'s count in `commandCalls`' map (0 for a command never run). */
export function callsOf(calls: Map<string, number>, name: string): number {
  return calls.get(name.toLowerCase()) ?? 0;
}

/** A replica of `primary` in sync, started as its own server. */
export async function replicaOf(primary: TestServer): Promise<TestServer> {
  const replica = await TestServer.start({ ...primary.spec, args: [...primary.spec.args, '--replicaof', '127.0.0.1', String(primary.port)] });
  if (primary.spec.setup !== 'module') {
    await replica.admin(['CONFIG', 'SET', 'masteruser', ADMIN.user]);
    await replica.admin(['CONFIG', 'SET', 'masterauth', ADMIN.password]);
  }
  const deadline = Date.now() + 10_000;
  while (!String(await primary.admin(['INFO', 'replication'])).includes('state=online')) {
    if (Date.now() > deadline) throw new Error('the replica did not come online within 10 s');
    await sleep(50);
  }
  return replica;
}
