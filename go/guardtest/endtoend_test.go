package guardtest

import (
	"context"
	"database/sql"
	"errors"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/guard"
)

// The guarantee end to end: a holder that paused past its lease comes back and writes with
// its old fence after a newer holder took the lock and wrote. The lock cannot stop it (it no
// longer asks the lock); the row refuses it, keeps the newer write, and the refusal is counted.
func TestAPausedHolderWhoseLeaseExpiredIsRefusedAtTheRow(t *testing.T) {
	eachLockServer(t, func(t *testing.T, client *redis.Client) {
		eachDatabase(t, func(t *testing.T, db *sql.DB, d guard.Dialect) {
			ctx := context.Background()
			g := jobsTable(t, db, d)
			locker, err := fencedlock.NewLocker(client, fencedlock.WithTTL(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer locker.Close()
			key := "invoice:1:" + d.String()

			old, err := locker.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Claim(ctx, db, 1, old.Fence()); err != nil {
				t.Fatalf("the first holder's claim: %v", err)
			}
			// The first holder pauses (no renewal) until its lease has run out...
			time.Sleep(old.Remaining() + 200*time.Millisecond)

			// ...and a second holder takes the lock with a newer fence, claims and writes.
			newer, err := locker.Acquire(ctx, key)
			if err != nil {
				t.Fatalf("the second holder could not acquire after the first lease expired: %v", err)
			}
			if newer.Fence() <= old.Fence() {
				t.Fatalf("fences %d then %d: not increasing", old.Fence(), newer.Fence())
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var status string
			if err := g.ClaimReturning(ctx, tx, 1, newer.Fence(), []string{"status"}, &status); err != nil || status != "PENDING" {
				t.Fatalf("the second holder's claim: %q %v", status, err)
			}
			if ok, err := g.Write(ctx, tx, 1, newer.Fence(), guard.NewUpdate().Set("status", "SENT").Set("note", "newer").When("status", "PENDING")); !ok || err != nil {
				t.Fatalf("the second holder's write: %v %v", ok, err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}

			// The first holder wakes up and writes what it had decided before its pause.
			ok, err := g.Write(ctx, db, 1, old.Fence(), guard.NewUpdate().Set("status", "SENT").Set("note", "stale"))
			var stale *guard.StaleError
			if ok || !errors.As(err, &stale) || stale.Fence != old.Fence() || stale.LastFence != newer.Fence() {
				t.Fatalf("the paused holder's write: %v, %v", ok, err)
			}
			if r := readRow(t, db, 1); r.Note.String != "newer" || r.Fence != int64(newer.Fence()) {
				t.Errorf("the row after the stale write: %+v", r)
			}
			if g.Refusals() != 1 {
				t.Errorf("%d refusals counted, want 1", g.Refusals())
			}
			if _, err := newer.Release(ctx); err != nil {
				t.Error(err)
			}
		})
	})
}

// Many holders with different fences write one row at once: the row ends with the largest
// fence's write, and every other write either was refused as stale or landed before every
// write of a larger fence (the row's history of fences only rises).
func TestConcurrentWritesLeaveTheLargestFencesWrite(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d guard.Dialect) {
		ctx := context.Background()
		g := jobsTable(t, db, d)
		const n = 24
		fences := rand.Perm(n)
		// Each write appends its fence to the history, in the statement that checks it.
		appendFence := `"history" || ',' || CAST(CAST(` + map[guard.Dialect]string{guard.Postgres: "$1", guard.SQLite: "?1"}[d] + ` AS bigint) AS text)`
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			applied = map[uint64]bool{}
			refused = map[uint64]bool{}
			start   = make(chan struct{})
		)
		for _, f := range fences {
			fence := uint64(f + 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, err := g.Write(ctx, db, 1, fence, guard.NewUpdate().Set("note", strconv.FormatUint(fence, 10)).SetSQL("history", appendFence))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case ok && err == nil:
					applied[fence] = true
				case errors.Is(err, guard.ErrStale):
					refused[fence] = true
				default:
					t.Errorf("fence %d: %v, %v", fence, ok, err)
				}
			}()
		}
		close(start)
		wg.Wait()

		r := readRow(t, db, 1)
		if r.Fence != n || r.Note.String != strconv.Itoa(n) {
			t.Errorf("the row after the race: %+v, want fence and note %d", r, n)
		}
		var history string
		if err := db.QueryRow(`SELECT history FROM invoice_jobs WHERE job_id = 1`).Scan(&history); err != nil {
			t.Fatal(err)
		}
		var written []uint64
		for _, s := range strings.Split(strings.TrimPrefix(history, ","), ",") {
			f, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("history %q: %v", history, err)
			}
			written = append(written, f)
		}
		if !sort.SliceIsSorted(written, func(i, j int) bool { return written[i] < written[j] }) || written[len(written)-1] != n {
			t.Errorf("the fences wrote in the order %v: not rising to %d", written, n)
		}
		if len(written) != len(applied) || len(applied)+len(refused) != n {
			t.Errorf("%d writes in the history, %d applied, %d refused, of %d", len(written), len(applied), len(refused), n)
		}
		for _, f := range written {
			if !applied[f] {
				t.Errorf("fence %d is in the history but was not reported applied", f)
			}
		}
		if g.Refusals() != uint64(len(refused)) {
			t.Errorf("%d refusals counted, %d seen", g.Refusals(), len(refused))
		}
		t.Logf("%s: %d applied in order %v, %d refused", d, len(applied), written, len(refused))
	})
}
