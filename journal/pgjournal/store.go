package pgjournal

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lazarusrt/lazarus/journal"
)

// ErrSchemaTooNew: the database holds a schema newer than this code knows.
// Open refuses it rather than write records an older layout cannot read.
var ErrSchemaTooNew = errors.New("pgjournal: database schema is newer than this code")

// DefaultMaxConns is the pool size Open uses unless the DSN sets
// pool_max_conns.
const DefaultMaxConns = 16

// DefaultTimeout bounds each call when Options.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// Options configures a Store. The zero value is valid: audit off, calls
// bounded by DefaultTimeout, reconnection backoff from
// DefaultReconnectBackoff to DefaultMaxReconnectBackoff.
type Options struct {
	// Audit turns on the audit rows of journal.Audit. Default: off, and then
	// PutModelCall only checks its call (ErrInvalid) and stores nothing,
	// ModelCalls returns nothing and GCModelCalls removes nothing (the rows
	// a Store with audit on wrote stay, for the next one).
	Audit bool
	// Timeout bounds each call, and Open (on top of the caller's context),
	// so that a server that stopped answering fails calls with an error
	// instead of hanging them: one wrapping journal.ErrUnavailable (nothing
	// written), or journal.ErrUnknownOutcome for a write it ended once its
	// COMMIT was sent, and context.DeadlineExceeded. Zero means
	// DefaultTimeout; negative means no bound.
	Timeout time.Duration
	// ReconnectBackoff is how long, once a call found the server
	// unreachable (a connection refused, reset or closed, the server
	// shutting down or starting up, too many connections), every call fails
	// at once with journal.ErrUnavailable without dialing; then one call
	// tries the server (a ping on a fresh connection) while the others keep
	// failing at once. Each failed attempt doubles the wait, up to
	// MaxReconnectBackoff; a successful one lets every call through again.
	// Zero (or less) means DefaultReconnectBackoff.
	ReconnectBackoff time.Duration
	// MaxReconnectBackoff bounds the wait between two reconnection
	// attempts, and so how long after the server is back calls keep
	// failing. Zero (or less) means DefaultMaxReconnectBackoff; it is
	// raised to ReconnectBackoff if below it.
	MaxReconnectBackoff time.Duration
	// Clock is the time source of the backoff. Nil means the system clock.
	Clock Clock
}

// Store is the PostgreSQL journal.Store. Open it with Open or OpenPool; the
// zero value is not usable.
type Store struct {
	pool    *pgxpool.Pool
	ownPool bool
	audit   bool
	timeout time.Duration
	closed  atomic.Bool
	br      *breaker
	bufs    chan *evBuf // the buffers of batches that returned (see getBuf)
	// pause waits between two runs of a write that lost a race
	// (awaitRerun): sleepCtx; tests replace it.
	pause func(ctx context.Context, d time.Duration) error
}

var _ journal.Store = (*Store)(nil)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one schema step: the file migrations/NNNN_name.sql takes the
// schema from version NNNN-1 to NNNN.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order. Their
// versions are 1, 2, 3, ... with no gap.
func migrations() ([]migration, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, f := range files {
		base := strings.TrimPrefix(f, "migrations/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("pgjournal: migration %s is not named NNNN_name.sql", base)
		}
		b, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: base, sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("pgjournal: migration %s: want version %d", m.name, i+1)
		}
	}
	return out, nil
}

// SchemaVersion is the schema version this code writes and reads.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// migrationLock is the advisory lock (two-key form, so that it never meets
// the conversation locks, which use the one-key form) under which Open
// migrates.
const migrationLockClass, migrationLockID = 0x4c7a6a6c, 1

// Open connects to the database of dsn (a PostgreSQL connection string or
// URL; pgxpool's pool_* parameters apply), applies the schema migrations
// it lacks and returns the Store, which owns the pool. It fails with an
// error wrapping journal.ErrInvalid on a DSN that does not parse,
// ErrSchemaTooNew on a database migrated by newer code, and
// journal.ErrUnavailable when no connection can be made: the server is down,
// does not answer within Options.Timeout (which bounds Open as it bounds
// every call), or refuses the connection (an unknown database or role, a
// failed authentication; the error says why). A ctx of the caller's that is
// done fails it with ctx's error.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgjournal: parse DSN: %w", journal.Invalidf("%v", err))
	}
	if !setsMaxConns(dsn) {
		cfg.MaxConns = DefaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgjournal: %w: %w", journal.ErrUnavailable, err)
	}
	s, err := OpenPool(ctx, pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownPool = true
	return s, nil
}

// CheckDSN reports a dsn that Open could not parse, connecting to
// nothing: its error wraps journal.ErrInvalid (and pgx's parse error), and
// its message is pgx's, which names what is wrong and shows the DSN with
// its password masked. A nil error promises only that Open gets past
// parsing; the database may still be unreachable.
func CheckDSN(dsn string) error {
	_, err := parseDSN(dsn)
	return err
}

// parseDSN is pgxpool's configuration of dsn, or CheckDSN's error.
func parseDSN(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, &dsnError{err: err}
	}
	return cfg, nil
}

// dsnError is a DSN that does not parse: pgx's message, wrapping
// journal.ErrInvalid and pgx's error.
type dsnError struct{ err error }

func (e *dsnError) Error() string { return e.err.Error() }

func (e *dsnError) Unwrap() []error { return []error{journal.ErrInvalid, e.err} }

// setsMaxConns reports whether dsn, which parses, sets pool_max_conns: a
// parameter of that name, not those words anywhere (an application name, a
// password).
func setsMaxConns(dsn string) bool {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return false
	}
	_, ok := cfg.RuntimeParams["pool_max_conns"]
	return ok
}

// OpenPool is Open on a pool the caller made and keeps: Close does not close
// it. A nil pool is ErrInvalid. The Store registers, on the pool's connections it writes with, a
// bytea[] codec that encodes the Store's own parameter type and hands every
// other value to the codec it replaces (see the package doc). When the Store finds the server unreachable it resets the pool
// (pgxpool.Pool.Reset), as it does its own.
func OpenPool(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, journal.Invalidf("pgjournal: OpenPool: nil pool")
	}
	s := &Store{pool: pool, audit: opts.Audit, timeout: opts.Timeout, bufs: make(chan *evBuf, 16), pause: sleepCtx}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	s.br = &breaker{clock: opts.Clock, first: opts.ReconnectBackoff, max: opts.MaxReconnectBackoff}
	if s.br.clock == nil {
		s.br.clock = systemClock{}
	}
	if s.br.first <= 0 {
		s.br.first = DefaultReconnectBackoff
	}
	if s.br.max <= 0 {
		s.br.max = DefaultMaxReconnectBackoff
	}
	s.br.max = max(s.br.max, s.br.first)
	bounded, cancel := s.bound(ctx)
	defer cancel()
	if err := s.migrate(bounded); err != nil {
		return nil, s.openError(ctx, err)
	}
	return s, nil
}

// openError makes the error of an Open that could not connect wrap
// journal.ErrUnavailable: a server that did not answer within Timeout (but
// not a done ctx of the caller's, whose error stays), and a connection the
// server refused (an unknown database or role, a failed authentication),
// whose error says why.
func (s *Store) openError(caller context.Context, err error) error {
	if errors.Is(err, journal.ErrUnavailable) || errors.Is(err, ErrSchemaTooNew) || caller.Err() != nil {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pgjournal: open: %w: no answer within Options.Timeout (%s): %w", journal.ErrUnavailable, s.timeout, err)
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return fmt.Errorf("pgjournal: open: %w: %w", journal.ErrUnavailable, err)
	}
	return err
}

// migrate applies the missing migrations, each in its own transaction,
// under a session advisory lock, so that stores opening at once apply each
// migration once.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.wrap(ctx, "open", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", migrationLockClass, migrationLockID); err != nil {
		return s.wrap(ctx, "open: lock", err)
	}
	defer func() {
		// A failed unlock leaves the lock to the session's end: destroy the
		// connection rather than return it to the pool holding the lock.
		// It runs even once ctx is done, bounded by a Timeout of its own
		// (a server that stopped answering must not hang Open).
		uctx, cancel := s.bound(context.WithoutCancel(ctx))
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock($1, $2)", migrationLockClass, migrationLockID); err != nil {
			_ = conn.Conn().Close(uctx)
		}
	}()
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS lz_schema (version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())"); err != nil {
		return s.wrap(ctx, "open: schema table", err)
	}
	var cur int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM lz_schema").Scan(&cur); err != nil {
		return s.wrap(ctx, "open: schema version", err)
	}
	if cur > len(ms) {
		return fmt.Errorf("pgjournal: database at schema version %d, this code knows up to %d: %w", cur, len(ms), ErrSchemaTooNew)
	}
	for _, m := range ms[cur:] {
		// A migration's locks (ALTER TABLE takes the table's strongest)
		// can meet those of the writers of Stores already running in a
		// deadlock; the server then rolls one transaction back. The
		// migration's is run again, as writeTx runs a write's.
		op := "open: migration " + m.name
		err := s.rerun(ctx, op, func() error {
			return s.wrap(ctx, op, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, m.sql); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "INSERT INTO lz_schema (version) VALUES ($1)", m.version)
				return err
			}))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ConcurrentBatches tells the journal actor how many AppendBatch calls to
// run at once: half the pool, at least 1 and at most MaxConcurrentBatches.
// Batches in flight hold no two requests of one conversation; each waits on
// the round trips and the WAL flush of its commit, which the server flushes
// together.
func (s *Store) ConcurrentBatches() int {
	return int(max(1, min(MaxConcurrentBatches, s.pool.Config().MaxConns/2)))
}

// MaxConcurrentBatches bounds ConcurrentBatches: more batches in flight
// overlap more round trips, fewer make larger batches, which cost the
// server and the client less per event (4 against 8 cost about a quarter
// less of the server's CPU per event under load; see BENCHMARKS.md).
const MaxConcurrentBatches = 4

// Close marks the Store closed and, if Open made the pool, closes it (which
// waits for the calls in flight to release their connections). Every later
// call returns an error wrapping journal.ErrClosed. It is safe to call more
// than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}

// errTimeout is the cause (context.Cause) of a context of bound's that
// Options.Timeout ended.
var errTimeout = errors.New("pgjournal: no answer within Options.Timeout")

// bound applies the Store's timeout to ctx: the context it returns ends
// with cause errTimeout once the timeout passed, and as ctx does if ctx
// ends first.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout < 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, s.timeout, errTimeout)
}

// stillOpen reports, between the calls of a listing's fn, why the listing
// must stop: the store closed (ErrClosed), else ctx, the caller's, done.
func (s *Store) stillOpen(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("pgjournal: %w", journal.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pgjournal: %w", err)
	}
	return nil
}

// enter reports why a call cannot start (closed, ctx done, the server
// taken to be unreachable: see Options.ReconnectBackoff) and returns the
// bounded context of the call.
func (s *Store) enter(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.closed.Load() {
		return nil, nil, fmt.Errorf("pgjournal: %w", journal.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("pgjournal: %w", err)
	}
	c, cancel := s.bound(ctx)
	if err := s.gate(c); err != nil {
		cancel()
		return nil, nil, err
	}
	return c, cancel, nil
}

// wrap turns an error of pgx into the Store's: it names op and wraps the
// journal sentinel that applies. Errors already wrapping a sentinel pass.
// ctx is the context the call ran under: a context error of a call that
// Options.Timeout ended (bound) is journal.ErrUnavailable, as a server
// that cannot be reached (nothing was written: an error met once a
// COMMIT was sent goes through wrapCommit instead), and a new connection
// it ended opens the breaker as a failed dial does (unavailable); one of
// the caller's ctx, done first, stays that context's error, with no
// sentinel.
func (s *Store) wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	for _, sentinel := range []error{journal.ErrClosed, journal.ErrInvalid, journal.ErrConflict, journal.ErrStale,
		journal.ErrNotFound, journal.ErrDeleted, journal.ErrCorrupt, journal.ErrUnavailable, journal.ErrUnknownOutcome,
		journal.ErrExists, journal.ErrEnded, journal.ErrNoSpace, ErrSchemaTooNew} {
		if errors.Is(err, sentinel) {
			return fmt.Errorf("pgjournal: %s: %w", op, err)
		}
	}
	if s.closed.Load() {
		return fmt.Errorf("pgjournal: %s: %w: %w", op, journal.ErrClosed, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if errors.Is(context.Cause(ctx), errTimeout) {
			s.unavailable(err)
			return fmt.Errorf("pgjournal: %s: %w: no answer within Options.Timeout (%s): %w", op, journal.ErrUnavailable, s.timeout, err)
		}
		return fmt.Errorf("pgjournal: %s: %w", op, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23505", pgErr.Code == "40001", pgErr.Code == "40P01":
			// unique violation (a tool call id taken by a concurrent
			// write), serialization failure, deadlock: nothing written.
			return fmt.Errorf("pgjournal: %s: %w: %w", op, journal.ErrConflict, err)
		case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "57P"), pgErr.Code == "53300",
			pgErr.Code == "25P03":
			// 25P03: the server ended the session, idle in its
			// transaction for longer than idle_in_transaction_session_timeout
			// (the writer stalled, a paused process say); the
			// transaction rolled back.
			s.unavailable(err)
			return fmt.Errorf("pgjournal: %s: %w: %w", op, journal.ErrUnavailable, err)
		}
		return fmt.Errorf("pgjournal: %s: %w", op, err)
	}
	// Anything else is the connection: refused, reset, closed.
	s.unavailable(err)
	return fmt.Errorf("pgjournal: %s: %w: %w", op, journal.ErrUnavailable, err)
}

// wrapCommit is wrap for an error met once COMMIT was sent: an error the
// server reported means the transaction rolled back; any other (the
// connection dropped, the call timed out, Options.Timeout's or the
// caller's ctx: its error is wrapped too) leaves the outcome unknown.
func (s *Store) wrapCommit(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// A server's error, not a context's: no context plays a part.
		return s.wrap(context.Background(), op, err)
	}
	return fmt.Errorf("pgjournal: %s: %w: %w", op, journal.ErrUnknownOutcome, err)
}

// wrapEnded is wrapCommit for an error met once a COMMIT, or a statement
// that commits on its own, was sent, when the client cannot tell whether
// the reply of the commit came before it: the server ending the session
// (an error of severity FATAL or PANIC: a backend terminated, a shutdown)
// may have done so once the commit was done, so the outcome is unknown.
// 25P03 is the exception: the server ended a session idle in its
// transaction, which rolled back before the COMMIT arrived.
func (s *Store) wrapEnded(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code != "25P03" {
		switch cmp.Or(pgErr.SeverityUnlocalized, pgErr.Severity) {
		case "FATAL", "PANIC":
			return fmt.Errorf("pgjournal: %s: %w: %w", op, journal.ErrUnknownOutcome, err)
		}
	}
	return s.wrapCommit(op, err)
}

// execCommit runs sql, a write of one statement that commits on its own
// (outside a transaction), and wraps its error: an error met once the
// statement was sent is wrapped as one met once COMMIT was sent (the
// statement may have run: the outcome is unknown unless the server
// reported an error). A statement the server rolled back for a lost race
// (lostRace) is run again, up to maxBatchAttempts times.
func (s *Store) execCommit(ctx context.Context, op, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := s.rerun(ctx, op, func() error {
		var err error
		tag, err = s.execCommitOnce(ctx, op, sql, args...)
		return err
	})
	return tag, err
}

// execCommitOnce is execCommit without the reruns.
func (s *Store) execCommitOnce(ctx context.Context, op, sql string, args ...any) (pgconn.CommandTag, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, s.wrap(ctx, op, err)
	}
	defer conn.Release()
	tag, err := conn.Exec(ctx, sql, args...)
	if err != nil && !pgconn.SafeToRetry(err) {
		return tag, s.wrapEnded(op, err)
	}
	return tag, s.wrap(ctx, op, err)
}

// lockKey is the advisory lock key of a conversation: the writes of one
// conversation take it, so that their checks and writes do not interleave.
func lockKey(conv string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(conv))
	return int64(h.Sum64())
}

// lockKeys returns the sorted, distinct lock keys of convs: taking them in
// that order keeps two batches from deadlocking.
func lockKeys(convs []string) []int64 {
	keys := make([]int64, 0, len(convs))
	for _, c := range convs {
		keys = append(keys, lockKey(c))
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// writeTx runs fn in a transaction holding conv's lock and commits it. A
// transaction the server rolled back for a lost race (lostRace: a deadlock,
// a serialization failure, a unique violation from a concurrent insert) is
// run again, fn included, up to maxBatchAttempts times, as AppendBatch
// runs its batch again: the rerun's reads see what the other writer
// committed, so its checks report what applies (ErrStale for a call that
// writer resolved, say), where the lost race was reported as ErrConflict.
// fn must so be safe to run again; one that is not (it consumes a reader)
// uses writeTxOnce.
func (s *Store) writeTx(ctx context.Context, op, conv string, fn func(tx pgx.Tx) error) error {
	return s.rerun(ctx, op, func() error { return s.writeTxOnce(ctx, op, conv, fn) })
}

// writeTxOnce is writeTx without the reruns.
func (s *Store) writeTxOnce(ctx context.Context, op, conv string, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.wrap(ctx, op, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if conv != "" {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(conv)); err != nil {
			return s.wrap(ctx, op, err)
		}
	}
	if err := fn(tx); err != nil {
		return s.wrap(ctx, op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return s.wrapEnded(op, err)
	}
	return nil
}

// checkDeleted returns ErrDeleted if conv has a tombstone.
func checkDeleted(ctx context.Context, q pgx.Tx, conv string) error {
	var deleted bool
	err := q.QueryRow(ctx, "SELECT deleted FROM lz_conversations WHERE id = $1", []byte(conv)).Scan(&deleted)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if deleted {
		return fmt.Errorf("conversation %q: %w", conv, journal.ErrDeleted)
	}
	return nil
}

// AuditEnabled implements journal.AuditReporter: whether the Store was
// opened with Options.Audit.
func (s *Store) AuditEnabled() bool { return s.audit }

var _ journal.AuditReporter = (*Store)(nil)
