// Package fencedlock takes distributed leases with fencing tokens on Redis or Valkey, over
// the application's own go-redis v9 client.
//
// A lease's fence is above every fence its key had before, and never repeats: not after
// release, expiry, restart or failover. A lock only decides who may try; hand the fence to the
// protected resource with every write and have it refuse writes with an older fence, or a
// paused holder whose lease ran out can still write.
//
// The server serves the contract with the fencedlock module (FENCEDLOCK.* commands) where it
// is loaded, else with the Functions library the package carries (loaded by the locker where
// the server's is missing or older), else with the same library as a script (EVALSHA) where
// FUNCTION is denied. The engine is detected per server. See docs/go.md.
package fencedlock
