module example.invalid/fencedlock/go

go 1.22

// v9.18.0 is the newest go-redis whose own go.mod asks for no Go above 1.22 (v9.19 asks 1.24,
// v9.23 asks 1.26); a module on a newer Go may require any later v9. scripts/test also runs the
// suite with the oldest v9 supported (go.oldest.mod, v9.5.1) and the newest (go.newest.mod).
require github.com/redis/go-redis/v9 v9.18.0

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	go.uber.org/atomic v1.11.0 // indirect
)
