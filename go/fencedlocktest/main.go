package fencedlocktest

import (
	"fmt"
	"os"
	"testing"
)

// StartMain starts a server outside any test, for a TestMain (so that a package's runnable
// examples have a server to talk to): the server, and stop, which kills it and removes its
// files. A server that cannot start is an error.
func StartMain(s Setup) (srv *Server, stop func(), err error) {
	tb := &mainTB{}
	stop = func() {
		for i := len(tb.cleanups) - 1; i >= 0; i-- {
			tb.cleanups[i]()
		}
		for _, dir := range tb.dirs {
			os.RemoveAll(dir)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			stop()
			srv, err = nil, f
		}
	}()
	return Start(tb, s), stop, nil
}

// mainTB is the part of testing.TB that Start uses, outside a test: its cleanups and
// temporary directories kept for stop, a fatal failure raised as a fatal panic (recovered by
// StartMain). The embedded TB is nil: a method not defined here is never called by Start.
type mainTB struct {
	testing.TB
	cleanups []func()
	dirs     []string
}

type fatal string

func (f fatal) Error() string { return string(f) }

func (m *mainTB) Helper()                           {}
func (m *mainTB) Cleanup(f func())                  { m.cleanups = append(m.cleanups, f) }
func (m *mainTB) Fatal(args ...any)                 { panic(fatal(fmt.Sprint(args...))) }
func (m *mainTB) Fatalf(format string, args ...any) { panic(fatal(fmt.Sprintf(format, args...))) }
func (m *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "fencedlocktest")
	if err != nil {
		m.Fatal(err)
	}
	m.dirs = append(m.dirs, dir)
	return dir
}
