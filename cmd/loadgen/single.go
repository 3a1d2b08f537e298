package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// singleResult is what the single-conversation phase (--single) reports:
// one busy conversation whose writer appends the workload's events one at
// a time, each synced, against a naive synced Pebble Set of the same
// events, in interleaved rounds; and the whole runtime's turn latency with
// one conversation.
type singleResult struct {
	Rounds []singleRound `json:"rounds"`
	// Runtime is the runtime phase with one conversation, no kills: its
	// turn latency is the single-conversation turn latency. Nil when the
	// run was interrupted before it.
	Runtime *runResult `json:"runtime,omitempty"`
}

// singleRound is one round of 2 x --single-round: the Store's sequential
// Appends and the naive Sets take turns, one turn's events each; each
// side's events/s and CPU are over the time spent in it.
type singleRound struct {
	AppendEvents   uint64  `json:"append_events"`
	AppendPerSec   float64 `json:"append_events_per_s"`
	AppendAck      latency `json:"append_ack"`
	AppendCPU      float64 `json:"append_cpu_us_per_event"`
	SetEvents      uint64  `json:"set_events"`
	SetPerSec      float64 `json:"set_events_per_s"`
	SetAck         latency `json:"set_ack"`
	SetCPU         float64 `json:"set_cpu_us_per_event"`
	AppendOverSets float64 `json:"append_over_set"`
}

// runSingle runs --single-rounds rounds of the Store's sequential Appends
// and the naive Sets taking turns (see singleRound), on two stores kept
// for the whole phase (so both grow alike), then the runtime with one
// conversation for --duration. Each Append carries one event (the first
// also the row's status), as each Set does: the same bytes of payload per
// sync. Interrupted (ctx ended), it returns ctx's error with the rounds it
// finished: a round cut short is left out.
func runSingle(ctx context.Context, cfg config, dir string) (singleResult, error) {
	var res singleResult
	store, err := pebblejournal.Open(filepath.Join(dir, "store"), pebblejournal.Options{Logger: cfg.logger})
	if err != nil {
		return res, err
	}
	defer store.Close()
	db, err := pebble.Open(filepath.Join(dir, "naive"), rawPebbleOptions())
	if err != nil {
		return res, err
	}
	defer db.Close()
	const conv = "single"
	var last uint64 // the Store's log
	var seq uint64  // the naive log
	prefix := binary.AppendUvarint([]byte("j/"), uint64(len(conv)))
	prefix = append(prefix, conv...)
	storeTurn, setTurn := 0, 0
	for range cfg.SingleRounds {
		var r singleRound
		var ack, setAck histogram
		var appendTime, setTime, appendCPU, setCPU time.Duration
		// The two sides take turns, one turn (5 events) each, so that both
		// see the same moments of a machine whose load changes.
		end := time.Now().Add(2 * cfg.SingleRound)
		for time.Now().Before(end) && ctx.Err() == nil {
			// The Store: one Append per event, each its own synced batch.
			t0, cpu0 := time.Now(), cpuTime()
			for _, ev := range turnLog(conv, storeTurn, 1) {
				req := &messages.AppendRequest{ConversationId: conv, ExpectedLast: last, Events: []*messages.Event{ev}, ToolCalls: callRows(conv, []*messages.Event{ev})}
				if last == 0 {
					req.Status = messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
				}
				a := time.Now()
				out, err := store.Append(ctx, req)
				if err != nil {
					return res, fmt.Errorf("append: %w", err)
				}
				ack.Record(time.Since(a))
				last = out.LastSeq
				r.AppendEvents++
			}
			storeTurn++
			appendTime += time.Since(t0)
			appendCPU += cpuTime() - cpu0

			// The naive design: one synced Set per event of its protobuf.
			t0, cpu0 = time.Now(), cpuTime()
			for _, ev := range turnLog(conv, setTurn, 1) {
				a := time.Now()
				seq++
				ev.Seq = seq
				v, err := proto.Marshal(ev)
				if err != nil {
					return res, err
				}
				k := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), seq)
				if err := db.Set(k, v, pebble.Sync); err != nil {
					return res, err
				}
				setAck.Record(time.Since(a))
				r.SetEvents++
			}
			setTurn++
			setTime += time.Since(t0)
			setCPU += cpuTime() - cpu0
		}
		if ctx.Err() != nil {
			break // a round cut short: its sides did not have their time
		}
		r.AppendPerSec, r.AppendAck = float64(r.AppendEvents)/appendTime.Seconds(), ack.summary()
		r.AppendCPU = div(float64(appendCPU.Microseconds()), float64(r.AppendEvents))
		r.SetPerSec, r.SetAck = float64(r.SetEvents)/setTime.Seconds(), setAck.summary()
		r.SetCPU = div(float64(setCPU.Microseconds()), float64(r.SetEvents))
		r.AppendOverSets = div(r.AppendPerSec, r.SetPerSec)
		res.Rounds = append(res.Rounds, r)
		afterSample("single", len(res.Rounds))
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	one := cfg
	one.Conversations, one.KillEvery, one.Rate, one.Compact = 1, 0, 0, false
	rt, err := runRuntime(ctx, one, filepath.Join(dir, "runtime"))
	if err != nil {
		return res, fmt.Errorf("runtime, one conversation: %w", err)
	}
	res.Runtime = &rt
	return res, nil
}

// rawPebbleOptions are the options of the naive Pebble stores: the ones
// pebblejournal sets.
func rawPebbleOptions() *pebble.Options {
	opts := &pebble.Options{
		Logger:                      pebbleQuiet{},
		FormatMajorVersion:          pebblejournal.FormatMajorVersion,
		CacheSize:                   pebblejournal.DefaultCacheSize,
		MemTableSize:                pebblejournal.DefaultMemTableSize,
		MemTableStopWritesThreshold: pebblejournal.MemTableStopWritesThreshold,
		L0CompactionThreshold:       pebblejournal.L0CompactionThreshold,
		L0StopWritesThreshold:       pebblejournal.L0StopWritesThreshold,
		LBaseMaxBytes:               pebblejournal.LBaseMaxBytes,
	}
	pebblejournal.SetLevelOptions(opts)
	return opts
}
