package fencedlock

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// frontPageMarker marks the front page's Go example (README.md); frontPageAddr is the server
// it names, the one scripts/run-server starts.
const (
	frontPageMarker = "<!-- example: go -->"
	frontPageAddr   = "127.0.0.1:6379"
)

// TestFrontPageExample builds the front page's Go example as a user's own module would (its
// own go.mod requiring this module by a replace) and runs it on every engine, its address
// pointed at the test's server: it must print one fence and leave the key released at that
// fence. A renamed option or a changed signature fails here, not in a user's first build.
func TestFrontPageExample(t *testing.T) {
	program := buildFrontPageExample(t)
	printed := regexp.MustCompile(`(?m)^report built with fence (\d+)$`)
	eachEngine(t, func(t *testing.T, srv *testServer, _ engine) {
		cmd := exec.Command(program, srv.addr())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the example failed: %v\n%s", err, out)
		}
		found := printed.FindAllStringSubmatch(string(out), -1)
		if len(found) != 1 {
			t.Fatalf("the example printed no single fence:\n%s", out)
		}
		fence, err := strconv.ParseUint(found[0][1], 10, 64)
		if err != nil || fence == 0 {
			t.Fatalf("the example printed fence %q", found[0][1])
		}
		status, err := newTestLocker(t, srv.client()).Status(context.Background(), "nightly-report")
		if err != nil {
			t.Fatal(err)
		}
		if status == nil || status.Fence != fence || len(status.Holders) != 0 {
			t.Fatalf("after the example: status %+v, want fence %d and no holder", status, fence)
		}
	})
}

// buildFrontPageExample writes the example into a module of its own and builds it, with its
// address read from its first argument. The module takes its requirements from this one's
// go.mod and go.sum and the module cache only (GOPROXY=off): what scripts/setup downloaded.
func buildFrontPageExample(t *testing.T) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(regexp.QuoteMeta(frontPageMarker) + "\n```go\n((?s).*?)```").FindSubmatch(page)
	if block == nil {
		t.Fatalf("README.md has no ```go block marked %s", frontPageMarker)
	}
	code := string(block[1])
	if !strings.Contains(code, strconv.Quote(frontPageAddr)) {
		t.Fatalf("the example no longer names %s:\n%s", frontPageAddr, code)
	}
	code = strings.Replace(code, strconv.Quote(frontPageAddr), "os.Args[1]", 1)
	code = strings.Replace(code, "import (\n", "import (\n\t\"os\"\n", 1)

	ownMod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	ownSum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	self := regexp.MustCompile(`(?m)^module (\S+)$`).FindSubmatch(ownMod)
	if self == nil {
		t.Fatal("go.mod names no module")
	}
	mod := strings.Replace(string(ownMod), string(self[0]), "module frontpage", 1) +
		"\nrequire " + string(self[1]) + " v0.0.0\n\nreplace " + string(self[1]) + " => " + here + "\n"

	dir := t.TempDir()
	for name, content := range map[string]string{"main.go": code, "go.mod": mod, "go.sum": string(ownSum)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	program := filepath.Join(dir, "example")
	build := exec.Command("go", "build", "-o", program, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the example does not build: %v\n%s\n%s", err, out, code)
	}
	return program
}
