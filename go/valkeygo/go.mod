module example.invalid/fencedlock/go/valkeygo

go 1.26.0

replace example.invalid/fencedlock/go => ../

require (
	example.invalid/fencedlock/go v0.0.0
	github.com/valkey-io/valkey-go v1.0.80
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/redis/go-redis/v9 v9.18.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
