package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
)

// seedPoolSize is the connection pool of the seed-design baseline: Ecto's
// default pool is 10 connections; 16 gives the baseline more, not less.
const seedPoolSize = 16

// pgSchema creates a fresh schema for one phase of a run (so that a run
// never meets the data of another, and the database needs no cleaning) and
// returns the DSN whose connections use it, and a function that drops it.
func pgSchema(ctx context.Context, dsn, phase string) (string, func(), error) {
	name := fmt.Sprintf("%s_%d", schemaPrefix(phase), time.Now().UnixNano())
	conn, err := connect(ctx, dsn)
	if err != nil {
		return "", nil, fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", nil, fmt.Errorf("postgres: %w", err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if c, err := connect(ctx, dsn); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA "+name+" CASCADE")
			_ = c.Close(ctx)
		}
	}
	return withParam(dsn, "search_path", name), drop, nil
}

// schemaPrefix is the start of the name of the schemas pgSchema creates
// for phase; a run's own is this and a number.
func schemaPrefix(phase string) string { return "lazarus_loadgen_" + phase }

// pgWhere says where the journal of phase lives on the server of dsn: the
// database, the server, and the schema (not the password of the DSN).
func pgWhere(dsn, phase string) string {
	where := "on PostgreSQL"
	if cfg, err := pgxpool.ParseConfig(dsn); err == nil {
		cc := cfg.ConnConfig
		where = fmt.Sprintf("on PostgreSQL, database %s on %s:%d,", cc.Database, cc.Host, cc.Port)
	}
	return where + " in a fresh schema " + schemaPrefix(phase) + "_*, dropped at the end"
}

// connect opens one connection of dsn, which may carry pgxpool's pool_*
// parameters (a plain pgx.Connect would send them to the server as settings
// it does not know).
func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg.ConnConfig)
}

// withParam adds a run-time parameter to a DSN, URL or key=value form.
func withParam(dsn, key, value string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err == nil {
			q := u.Query()
			q.Set(key, value)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return dsn + " " + key + "=" + value
}

// schemaStore is a pgjournal.Store in a schema of its own, dropped on Close.
type schemaStore struct {
	*pgjournal.Store
	drop func()
}

// Close implements journal.Store: it closes the store and drops its schema.
func (s *schemaStore) Close() error {
	err := s.Store.Close()
	s.drop()
	return err
}

// openPostgres opens the journal of one phase in a fresh schema.
func openPostgres(ctx context.Context, cfg config, phase string) (journal.Store, error) {
	dsn, drop, err := pgSchema(ctx, cfg.Postgres, phase)
	if err != nil {
		return nil, err
	}
	st, err := pgjournal.Open(ctx, dsn, pgjournal.Options{})
	if err != nil {
		drop()
		return nil, err
	}
	return &schemaStore{Store: st, drop: drop}, nil
}

// runSeedPostgres is baseline (a) on PostgreSQL: the seed's design, one
// transaction per event that bumps the conversation's last_seq and inserts
// the event row (its protobuf bytes), by as many concurrent writers as the
// runtime phase has conversations, over a pool of seedPoolSize
// connections, on the same server as the runtime phase.
func runSeedPostgres(ctx context.Context, cfg config) (rawResult, error) {
	dsn, drop, err := pgSchema(ctx, cfg.Postgres, "seed")
	if err != nil {
		return rawResult{}, err
	}
	defer drop()
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return rawResult{}, err
	}
	pcfg.MaxConns = seedPoolSize
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return rawResult{}, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE conversations (id text PRIMARY KEY, last_seq bigint NOT NULL);
		CREATE TABLE events (conv text NOT NULL, seq bigint NOT NULL, data bytea NOT NULL, PRIMARY KEY (conv, seq))`); err != nil {
		return rawResult{}, err
	}
	var events atomic.Uint64
	var ack histogram
	var measuring atomic.Bool
	resetPeakRSS()
	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for i := range cfg.Conversations {
		wg.Go(func() {
			conv := fmt.Sprintf("conv-%05d", i)
			if _, err := pool.Exec(runCtx, "INSERT INTO conversations VALUES ($1, 0)", conv); err != nil {
				if runCtx.Err() == nil {
					failed.Store(&err)
				}
				return
			}
			for turn := 0; runCtx.Err() == nil; turn++ {
				for _, ev := range turnLog(conv, turn, 1) {
					if runCtx.Err() != nil {
						return
					}
					t0 := time.Now()
					err := pgx.BeginFunc(runCtx, pool, func(tx pgx.Tx) error {
						var seq int64
						if err := tx.QueryRow(runCtx, "UPDATE conversations SET last_seq = last_seq + 1 WHERE id = $1 RETURNING last_seq", conv).Scan(&seq); err != nil {
							return err
						}
						ev.Seq = uint64(seq)
						v, err := proto.Marshal(ev)
						if err != nil {
							return err
						}
						_, err = tx.Exec(runCtx, "INSERT INTO events VALUES ($1, $2, $3)", conv, seq, v)
						return err
					})
					if err != nil {
						if runCtx.Err() == nil {
							failed.Store(&err)
						}
						return
					}
					if measuring.Load() {
						ack.Record(time.Since(t0))
						events.Add(1)
					}
				}
			}
		})
	}
	warm := time.NewTimer(cfg.Warmup)
	select {
	case <-warm.C:
	case <-runCtx.Done():
	}
	start, cpu0 := time.Now(), cpuTime()
	measuring.Store(true)
	<-runCtx.Done()
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	n := events.Load()
	wg.Wait()
	if p := failed.Load(); p != nil {
		return rawResult{}, *p
	}
	return rawResult{
		Seconds: elapsed.Seconds(), Writers: cfg.Conversations, Events: n,
		EventsPerSec: float64(n) / elapsed.Seconds(), SetAck: ack.summary(),
		PeakRSS: peakRSS(), CPUPerEvent: div(float64(cpu.Microseconds()), float64(n)), CPUUtil: cpu.Seconds() / elapsed.Seconds(),
	}, nil
}
