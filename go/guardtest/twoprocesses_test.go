package guardtest

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/guard"
	"github.com/redis/go-redis/v9"
)

// holderEnv makes the test binary the first holder's process (see runHolder) instead of the
// tests.
const holderEnv = "FENCEDLOCK_GUARD_HOLDER"

const holderTTL = time.Second

// The showing: two processes; the first acquires (kept alive), claims the row, and is
// SIGSTOPped past its lease; the second acquires with a newer fence, claims and writes; the
// first, continued, writes with its old fence: refused as stale and counted in its process,
// and the row keeps the second's write.
func TestTwoProcessesOneStoppedPastItsLeaseIsRefusedAtTheRow(t *testing.T) {
	eachLockServer(t, func(t *testing.T, client *redis.Client) {
		for _, d := range []guard.Dialect{guard.Postgres, guard.SQLite} {
			t.Run(d.String(), func(t *testing.T) { twoProcesses(t, client, d) })
		}
	})
}

func twoProcesses(t *testing.T, client *redis.Client, d guard.Dialect) {
	ctx := context.Background()
	var db *sql.DB
	var dsn string
	if d == guard.Postgres {
		db, dsn = postgresDBURL(t)
	} else {
		db, dsn = sqliteDBURL(t)
	}
	g := jobsTable(t, db, d)
	key := "invoice:1:two-processes:" + d.String()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"=1", "HOLDER_REDIS="+client.Options().Addr, "HOLDER_DRIVER="+driverOf[d],
		"HOLDER_DSN="+dsn, "HOLDER_DIALECT="+d.String(), "HOLDER_KEY="+key)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(out)
	// Waited for only once its output is read: Wait closes the pipe as the process exits, and
	// a Wait running alongside lost the holder's last line when the holder exited before it
	// was read ("file already closed", seen under load).
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = io.Copy(io.Discard, lines)
		_ = cmd.Wait()
	})

	var oldFence uint64
	line, err := lines.ReadString('\n')
	if _, serr := fmt.Sscanf(line, "claimed %d", &oldFence); err != nil || serr != nil {
		t.Fatalf("the first holder: %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(holderTTL + 500*time.Millisecond) // its lease runs out: no renewal from a stopped process

	locker, err := fencedlock.NewLocker(client, fencedlock.WithTTL(holderTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("the second holder could not acquire while the first was stopped: %v", err)
	}
	defer lease.Release(ctx)
	if lease.Fence() <= oldFence {
		t.Fatalf("fences %d then %d", oldFence, lease.Fence())
	}
	if err := g.Claim(ctx, db, 1, lease.Fence()); err != nil {
		t.Fatalf("the second holder's claim: %v", err)
	}
	if ok, err := g.Write(ctx, db, 1, lease.Fence(), guard.NewUpdate().Set("note", "second")); !ok || err != nil {
		t.Fatalf("the second holder's write: %v %v", ok, err)
	}

	if _, err := io.WriteString(stdin, "write\n"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	line, err = lines.ReadString('\n')
	want := fmt.Sprintf("refused stale %d %d refusals=1\n", oldFence, lease.Fence())
	if err != nil || line != want {
		t.Errorf("the first holder's write after its pause: %q, %v; want %q", line, err, want)
	}
	if r := readRow(t, db, 1); r.Note.String != "second" || r.Fence != int64(lease.Fence()) {
		t.Errorf("the row: %+v", r)
	}
}

// runHolder is the first holder's process: acquire (kept alive), claim row 1, say the fence,
// then on "write" from stdin write with that fence and say what happened.
func runHolder() int {
	fail := func(what string, err error) int { fmt.Fprintf(os.Stderr, "holder: %s: %v\n", what, err); return 1 }
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("HOLDER_REDIS"), ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := fencedlock.NewLocker(client, fencedlock.WithTTL(holderTTL))
	if err != nil {
		return fail("locker", err)
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, os.Getenv("HOLDER_KEY"))
	if err != nil {
		return fail("acquire", err)
	}
	lease.KeepAlive()
	db, err := sql.Open(os.Getenv("HOLDER_DRIVER"), os.Getenv("HOLDER_DSN"))
	if err != nil {
		return fail("open", err)
	}
	defer db.Close()
	d := guard.Postgres
	if os.Getenv("HOLDER_DIALECT") == guard.SQLite.String() {
		d = guard.SQLite
	}
	g, err := guard.New(d, guard.Table{Name: "invoice_jobs", ID: "job_id"})
	if err != nil {
		return fail("guard", err)
	}
	if err := g.Claim(ctx, db, 1, lease.Fence()); err != nil {
		return fail("claim", err)
	}
	fmt.Printf("claimed %d\n", lease.Fence())
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "write\n" {
		return fail("stdin", err)
	}
	// The write it had decided on before the pause, sent without looking at the lease again.
	ok, err := g.Write(ctx, db, 1, lease.Fence(), guard.NewUpdate().Set("note", "first"))
	var stale *guard.StaleError
	switch {
	case errors.As(err, &stale):
		fmt.Printf("refused stale %d %d refusals=%d\n", stale.Fence, stale.LastFence, g.Refusals())
	default:
		fmt.Printf("written %v %v\n", ok, err)
	}
	return 0
}
