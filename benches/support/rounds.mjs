// The Node benchmarks' one method for timing leases side by side (node_locks.mjs,
// lease_floor.mjs): one lease at a time, each contender in turn.

export const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/**
 * The µs per lease of each contender (median of `rounds`) and its ratio to `base`'s (median of
 * the per-round ratios). Within a round the contenders take turns in batches of `batch` leases,
 * in an order that flips every batch, so a burst of load on this shared machine lands on all of
 * them alike. Each contender is warmed first with 50 leases of its key.
 */
export async function leaseRounds(contenders, base, { rounds, leases, batch = 50 }) {
  const perLease = Object.fromEntries(Object.keys(contenders).map((name) => [name, []]));
  for (const [name, run] of Object.entries(contenders)) for (let i = 0; i < 50; i++) await run(`lease:${name}`);
  for (let round = 0; round < rounds; round++) {
    const spent = Object.fromEntries(Object.keys(contenders).map((name) => [name, 0]));
    for (let b = 0; b < leases / batch; b++) {
      const order = Object.entries(contenders);
      if (b % 2 === 1) order.reverse();
      for (const [name, run] of order) {
        const start = performance.now();
        for (let i = 0; i < batch; i++) await run(`lease:${name}`);
        spent[name] += performance.now() - start;
      }
    }
    for (const name of Object.keys(contenders)) perLease[name].push((spent[name] * 1000) / leases);
  }
  const lease = {};
  for (const name of Object.keys(contenders)) {
    lease[name] = {
      us_per_lease: median(perLease[name]),
      [`ratio_to_${base}`]: median(perLease[name].map((t, i) => t / perLease[base][i])),
    };
  }
  return lease;
}

/** The rows of leaseRounds as a markdown table. */
export function printLeases(title, lease, base) {
  console.log(`\n| ${title} | µs per lease | ÷ ${base} (median of rounds) |`);
  console.log('| --- | ---: | ---: |');
  for (const [name, r] of Object.entries(lease)) console.log(`| ${name} | ${r.us_per_lease.toFixed(0)} | ${r[`ratio_to_${base}`].toFixed(2)}× |`);
}
