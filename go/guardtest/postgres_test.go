package guardtest

// A real PostgreSQL server, started as the Rust harness and the Python tests start one:
// PostgreSQL refuses to run as root, so under root (CI) it runs as the unprivileged postgres
// user (Debian's package creates it; else fencedlock-pg, created here) in a temp dir it owns;
// initdb -A trust (a throwaway cluster on loopback), pg_ctl start -w on 127.0.0.1 on a port of
// 30000-30999 (the other suites use other ranges) with its socket in the temp dir, pg_ctl stop
// -m immediate when the tests end. One server per test binary; each test gets a database of
// its own. A server that cannot start fails the test with what to do: nothing is skipped.

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

const pgHint = "install Debian's postgresql package (scripts/setup does), or set FENCEDLOCK_PG_BIN"

type pgServer struct {
	bin, dir string
	port     int
	cred     *syscall.Credential
}

var (
	pgOnce    sync.Once
	pgRunning *pgServer
	pgErr     error
	pgDBs     atomic.Int64
)

// postgresDB is a database of the test's own on the shared server, closed when the test ends.
func postgresDB(t *testing.T) *sql.DB {
	t.Helper()
	db, _ := postgresDBURL(t)
	return db
}

// postgresDBURL is postgresDB and its URL, for another process to open.
func postgresDBURL(t *testing.T) (*sql.DB, string) {
	t.Helper()
	pgOnce.Do(func() { pgRunning, pgErr = startPostgres() })
	if pgErr != nil {
		t.Fatalf("PostgreSQL did not start: %v", pgErr)
	}
	admin, err := sql.Open("pgx", pgRunning.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := fmt.Sprintf("guard_%d", pgDBs.Add(1))
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("CREATE DATABASE %s: %v", name, err)
	}
	db, err := sql.Open("pgx", pgRunning.url(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, pgRunning.url(name)
}

func (s *pgServer) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

func pgBin() (string, error) {
	complete := func(d string) bool {
		for _, p := range []string{"initdb", "pg_ctl"} {
			if fi, err := os.Stat(filepath.Join(d, p)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("FENCEDLOCK_PG_BIN"); d != "" {
		if !complete(d) {
			return "", fmt.Errorf("FENCEDLOCK_PG_BIN=%s has no initdb and pg_ctl: %s", d, pgHint)
		}
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*")
	var versions []int
	for _, d := range dirs {
		if v, err := strconv.Atoi(filepath.Base(d)); err == nil && complete(filepath.Join(d, "bin")) {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		return "", fmt.Errorf("PostgreSQL's initdb was not found in /usr/lib/postgresql/*/bin: %s", pgHint)
	}
	sort.Ints(versions)
	return fmt.Sprintf("/usr/lib/postgresql/%d/bin", versions[len(versions)-1]), nil
}

// pgOwner is the unprivileged user the server runs as under root; nil otherwise.
func pgOwner() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	lookup := func() *syscall.Credential {
		for _, name := range []string{"postgres", "fencedlock-pg"} {
			u, err := user.Lookup(name)
			if err != nil {
				continue
			}
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			if uid != 0 {
				return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
			}
		}
		return nil
	}
	if c := lookup(); c != nil {
		return c, nil
	}
	_ = exec.Command("useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", "fencedlock-pg").Run()
	if c := lookup(); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("PostgreSQL refuses to run as root, and no unprivileged user could be created for it")
}

func (s *pgServer) run(name string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func startPostgres() (*pgServer, error) {
	bin, err := pgBin()
	if err != nil {
		return nil, err
	}
	cred, err := pgOwner()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencedlock-go-pg-")
	if err != nil {
		return nil, err
	}
	s := &pgServer{bin: bin, dir: dir, cred: cred}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := s.run("initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C",
		"--no-sync", "--no-instructions"); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	var out string
	for try := 0; try < 8; try++ {
		s.port, err = freePort(30000, 31000)
		if err != nil {
			return nil, err
		}
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100", s.port, dir)
		out, err = s.run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "postgres.log"), "-w", "-t", "60", "-o", opts, "start")
		if err == nil {
			return s, nil
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
	return nil, fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, tail(string(log), 2000))
}

func (s *pgServer) stop() {
	_, _ = s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "stop")
	_ = os.RemoveAll(s.dir)
}

var (
	portMu    sync.Mutex
	portsUsed = map[int]bool{}
)

// freePort is a port of [lo, hi) nobody listens on, starting at a place of this process's own.
func freePort(lo, hi int) (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	n := hi - lo
	start := (os.Getpid() * 7919) % n
	for i := 0; i < n; i++ {
		port := lo + (start+i*37)%n
		if portsUsed[port] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		portsUsed[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free port in %d-%d", lo, hi-1)
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(runHolder())
	}
	code := m.Run()
	if pgRunning != nil {
		pgRunning.stop()
	}
	os.Exit(code)
}
