// Command gen copies the wire contract (protocol/contract.json), the Functions library
// (protocol/src/functions.lua) and the guard's SQL contract (guard/contract.json) into this
// module, byte for byte, so the packages can embed them: a Go module cannot reach files
// outside its own directory at build time. Run it with `go generate ./...` from go/; the test
// TestEmbeddedContractIsCurrent fails when the copies differ from the repository's.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// copies maps each file of the repository (relative to go/) to its copy in the module.
var copies = [][2]string{
	{"../protocol/contract.json", "internal/contract/contract.json"},
	{"../protocol/src/functions.lua", "internal/contract/functions.lua"},
	{"../guard/contract.json", "internal/contract/guard.json"},
}

func main() {
	// go generate runs in the directory of the file naming the directive (go/).
	for _, c := range copies {
		data, err := os.ReadFile(filepath.FromSlash(c[0]))
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(filepath.FromSlash(c[1]), data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
