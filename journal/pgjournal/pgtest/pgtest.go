// Package pgtest starts a throwaway PostgreSQL server for tests: initdb and
// postgres run directly as a child process, listening on 127.0.0.1 and a
// socket in a temporary directory, and die with the test binary.
//
// One server serves a test package (start it in TestMain with Main); each
// test gets a fresh database from Server.NewDatabase. The binaries come from
// Debian's postgresql package (`make deps` installs it); PG_BINDIR overrides
// where they are looked for. A missing binary fails the tests: it never skips
// them, so that CI cannot pass without running them.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinDirEnv names the environment variable that overrides the directory of
// the PostgreSQL binaries.
const BinDirEnv = "PG_BINDIR"

// DefaultBinDir is where Debian's postgresql package puts PostgreSQL 15.
const DefaultBinDir = "/usr/lib/postgresql/15/bin"

// BinDir returns the directory of initdb and postgres: $PG_BINDIR, or
// DefaultBinDir.
func BinDir() string {
	if d := os.Getenv(BinDirEnv); d != "" {
		return d
	}
	return DefaultBinDir
}

// Server is one running PostgreSQL. Its methods are safe for concurrent use.
type Server struct {
	dir  string // temporary directory: data/ and the socket
	port int
	cred *syscall.Credential // nil unless running as root

	mu  sync.Mutex
	cmd *exec.Cmd
	// exited is closed when cmd exits.
	exited chan struct{}

	dbs atomic.Int64
}

// Start runs initdb in a new temporary directory and starts the server on a
// free port of 127.0.0.1. When the caller is root, the server runs as the
// postgres user (PostgreSQL refuses to run as root). The server is killed
// when the calling process dies.
func Start() (*Server, error) {
	bin := BinDir()
	for _, name := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return nil, fmt.Errorf("pgtest: PostgreSQL binary %s not found in %s (run `make deps`, or set %s): %w", name, bin, BinDirEnv, err)
		}
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &Server{dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: running as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", s.dataDir(), "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	if err := s.start(0); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

// freePort asks the kernel for a free port of 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start starts postgres on port (a free one if 0) and waits until it
// accepts connections.
func (s *Server) start(port int) error {
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		port = p
	}
	cmd := exec.Command(filepath.Join(BinDir(), "postgres"), "-D", s.dataDir(),
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+s.dir,
		"-c", "max_connections=200",
		"-c", "shared_buffers=64MB",
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=fatal",
	)
	// A process group of its own, so that StopServer kills the backends
	// with the postmaster: no backend serves a query after it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	logf, err := os.Create(filepath.Join(s.dir, "server.log"))
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.port = cmd, exited, port
	s.mu.Unlock()

	deadline := time.Now().Add(60 * time.Second)
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			return fmt.Errorf("pgtest: postgres exited while starting: %s", log)
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("pgtest: postgres did not accept connections within 60s: %w", err)
		}
	}
}

// DSN returns the connection string of database db.
func (s *Server) DSN(db string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// NewDatabase creates an empty database and returns its DSN. The database
// is dropped when t ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.dbs.Add(1))
	if err := s.exec(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		_ = s.exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return s.DSN(name)
}

// exec runs one statement in the postgres database.
func (s *Server) exec(ctx context.Context, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// Restart stops the server abruptly (SIGKILL: every connection drops, as in
// a crash of the server; what was committed stays, since the files are
// intact) and starts it again on the same port.
func (s *Server) Restart() error {
	s.StopServer()
	return s.Resume()
}

// StopServer kills the server (SIGKILL to the postmaster and every
// backend: once it returns, no query is served) without removing its
// files; Resume
// starts it again on the same port. Together they are Restart with a gap in
// between.
func (s *Server) StopServer() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	// Every backend is its own process group (PostgreSQL calls setsid in
	// each child), and a backend whose postmaster died goes on serving its
	// connection until it notices. So: freeze the postmaster (it forks no
	// more), kill its children, then it, and wait until all are gone.
	pid := cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	children := childrenOf(pid)
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-exited
	for _, c := range children {
		for deadline := time.Now().Add(10 * time.Second); processExists(c) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond) // the kernel reaping a killed process
		}
	}
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// the last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 {
			if ppid, err := strconv.Atoi(fields[1]); err == nil && ppid == pid {
				out = append(out, child)
			}
		}
	}
	return out
}

// processExists reports whether pid is still a process that is not a
// zombie.
func processExists(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	fields := strings.Fields(string(stat[i+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// Resume starts a server stopped by StopServer on the same port. The
// killed server's backends exit soon after it, but until they have, a new
// postmaster refuses to start; Resume retries for up to 30 seconds.
func (s *Server) Resume() error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.start(s.port)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond) // waiting for the OS to reap the old backends
	}
}

// Close stops the server (a fast shutdown) and removes its directory.
func (s *Server) Close() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	return os.RemoveAll(s.dir)
}

var (
	shared    *Server
	sharedErr error
)

// Main is the TestMain of a package whose tests need PostgreSQL: it starts
// the package's server, runs the tests and stops it. If the server cannot
// start, every test fails (Shared reports why); none is skipped.
func Main(m *testing.M) {
	shared, sharedErr = Start()
	if sharedErr != nil {
		fmt.Fprintln(os.Stderr, sharedErr)
	}
	code := m.Run()
	if shared != nil {
		_ = shared.Close()
	}
	os.Exit(code)
}

// Shared returns the server Main started, failing t if there is none.
func Shared(t testing.TB) *Server {
	t.Helper()
	if shared == nil {
		err := sharedErr
		if err == nil {
			err = errors.New("pgtest: no server: call pgtest.Main from TestMain")
		}
		t.Fatal(err)
	}
	return shared
}

// NewDatabase is Shared(t).NewDatabase(t).
func NewDatabase(t testing.TB) string {
	t.Helper()
	return Shared(t).NewDatabase(t)
}
