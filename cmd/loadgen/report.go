package main

import (
	"fmt"
	"io"
)

// ratios are the figures of the runtime against the baselines of the same
// run.
type ratios struct {
	// EventsVsRaw: runtime events/s over baseline (a) events/s.
	EventsVsRaw float64 `json:"events_runtime_over_raw,omitempty"`
	// SendP99VsRawP99: runtime Send ack p99 over baseline (a) Set p99.
	SendP99VsRawP99 float64 `json:"send_p99_over_raw_set_p99,omitempty"`
	// EventsVsSeed: runtime events/s on PostgreSQL over the seed's design
	// (one transaction per event) on the same server.
	EventsVsSeed float64 `json:"events_runtime_over_seed_postgres,omitempty"`
	// LongVsShortRevival: Kill-then-Send p50, long conversation over the
	// 100-event one.
	LongVsShortRevival float64 `json:"revival_long_over_short_p50,omitempty"`
	// LongRevivalVsWarm: Kill-then-Send p50 of the long conversation over
	// a Send to a live actor.
	LongRevivalVsWarm float64 `json:"revival_long_over_warm_send_p50,omitempty"`
	// ReplayOverRevival: full replay p50 over the long Kill-then-Send p50
	// (how many times faster revival from a summary is).
	ReplayOverRevival float64 `json:"full_replay_over_revival_p50,omitempty"`
	// ReplayOverLoadSince: full replay p50 over LoadSince + Rebuild p50,
	// both store reads.
	ReplayOverLoadSince float64 `json:"full_replay_over_loadsince_p50,omitempty"`
}

// target is one of the runtime's performance targets (BENCHMARKS.md) and
// whether this run met it.
type target struct {
	Name     string  `json:"name"`
	Want     string  `json:"want"`
	Measured float64 `json:"measured"`
	Unit     string  `json:"unit"`
	Met      bool    `json:"met"`
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func evaluate(r *report) (ratios, []target) {
	var q ratios
	rt := r.Runtime
	ts := []target{
		{Name: "runtime events/s", Want: ">= 50000", Measured: rt.EventsPerSec, Unit: "events/s", Met: rt.EventsPerSec >= 50_000},
		{Name: "Send ack p99", Want: "< 20 ms", Measured: rt.SendAck.P99, Unit: "ms", Met: rt.SendAck.P99 < 20},
		{Name: "event ack p99", Want: "< 20 ms", Measured: rt.EventAck.P99, Unit: "ms", Met: rt.EventAck.P99 < 20},
	}
	if raw := r.RawPebble; raw != nil {
		q.EventsVsRaw = div(rt.EventsPerSec, raw.EventsPerSec)
		q.SendP99VsRawP99 = div(rt.SendAck.P99, raw.SetAck.P99)
		ts = append(ts, target{Name: "runtime over baseline (a) events/s", Want: ">= 1.5x", Measured: q.EventsVsRaw, Unit: "x", Met: q.EventsVsRaw >= 1.5})
	}
	if seed := r.SeedPG; seed != nil {
		q.EventsVsSeed = div(rt.EventsPerSec, seed.EventsPerSec)
		ts = append(ts, target{Name: "runtime over the seed's design on PostgreSQL, events/s", Want: ">= 10x", Measured: q.EventsVsSeed, Unit: "x", Met: q.EventsVsSeed >= 10})
	}
	if rev := r.Revival; rev != nil {
		q.LongVsShortRevival = div(rev.LongRevival.P50, rev.ShortRevival.P50)
		q.LongRevivalVsWarm = div(rev.LongRevival.P50, rev.WarmSend.P50)
		q.ReplayOverRevival = div(rev.FullReplay.P50, rev.LongRevival.P50)
		q.ReplayOverLoadSince = div(rev.FullReplay.P50, rev.LongLoadSince.P50)
		ts = append(ts,
			target{Name: fmt.Sprintf("revival p50, %d events", rev.Events), Want: "< 2 ms", Measured: rev.LongRevival.P50, Unit: "ms", Met: rev.LongRevival.P50 < 2},
			target{Name: "revival p50, long over 100 events", Want: "<= 1.5x", Measured: q.LongVsShortRevival, Unit: "x", Met: q.LongVsShortRevival <= 1.5},
			target{Name: "full replay over revival p50", Want: ">= 100x", Measured: q.ReplayOverRevival, Unit: "x", Met: q.ReplayOverRevival >= 100},
		)
	}
	if fp := rt.Compacted; fp != nil {
		ts = append(ts, target{Name: "disk per event, compacted", Want: "<= 450", Measured: fp.BytesPerEvt, Unit: "B/event", Met: fp.BytesPerEvt <= 450})
	}
	for _, o := range r.OpenLoop {
		var limit float64
		switch o.Fraction {
		case 0.5:
			limit = 20
		case 0.75:
			limit = 50
		default:
			continue
		}
		p99 := o.Result.SendAck.P99
		ts = append(ts, target{Name: fmt.Sprintf("open loop at %.0f%%, Send ack p99", 100*o.Fraction), Want: fmt.Sprintf("< %.0f ms", limit), Measured: p99, Unit: "ms", Met: p99 < limit})
	}
	if sg := r.Single; sg != nil && len(sg.Rounds) > 0 {
		var a, s float64
		for _, x := range sg.Rounds {
			a += x.AppendPerSec
			s += x.SetPerSec
		}
		ratio := div(a, s)
		ts = append(ts, target{Name: "one conversation, Append over Set", Want: ">= 1x", Measured: ratio, Unit: "x", Met: ratio >= 1})
	}
	return q, ts
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func lat(l latency) string {
	return fmt.Sprintf("%8.2f %8.2f %8.2f %8.2f  (n=%d)", l.P50, l.P99, l.P999, l.Max, l.Count)
}

func printReport(w io.Writer, r *report) {
	c := r.Config
	rt := r.Runtime
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	procs := fmt.Sprintf("GOMAXPROCS %d", r.Machine.GoMaxProcs)
	if rt.GoMaxProcs != 0 && rt.GoMaxProcs != r.Machine.GoMaxProcs {
		procs += fmt.Sprintf(" (%d while the runtime's store is open)", rt.GoMaxProcs)
	}
	p("lazarus loadgen, %s, %d CPUs, %s, %s", r.Date, r.Machine.CPUs, procs, r.Machine.GoVersion)
	p("workload: %d conversations, %v, think %v, summary every %d turns, %.0f%% human turns (answered after %v), a kill every %v",
		c.Conversations, c.Duration, c.Think, c.SummaryEvery, c.HumanFraction*100, c.HumanDelay, c.KillEvery)
	if r.Interrupted != "" {
		p("INTERRUPTED in the %s phase: its figures are partial, what it measured until then; the later phases were skipped", r.Interrupted)
	}
	p("")
	p("runtime (every event durable before it is acknowledged)")
	p("  events/s               %10.0f   (%d events in %.1fs)", rt.EventsPerSec, rt.Events, rt.Seconds)
	p("  turns/s                %10.0f   (%d turns, %d with a human call, %d failed, %d stalls)", rt.TurnsPerSec, rt.Turns, rt.HumanTurns, rt.Failures, rt.Stalls)
	p("  latency ms                  p50      p99    p99.9      max")
	p("  Send ack               %s", lat(rt.SendAck))
	p("  event ack              %s", lat(rt.EventAck))
	p("  Resolve ack            %s", lat(rt.ResolveAck))
	p("  turn                   %s", lat(rt.TurnLatency))
	p("  revival under load     %s   (Kill, then Wake served; %d kills)", lat(rt.Revival), rt.Kills)
	p("  CPU                    %10.1f us/event (%.0f%% of one core)", rt.CPUPerEvent, 100*rt.CPUUtil)
	p("  peak RSS               %10.0f MiB", mib(rt.PeakRSS))
	p("  disk                   %10.0f B/event (%d events, %.0f MiB)", rt.DiskBytesPerEvnt, rt.StoredEvents, mib(uint64(rt.DiskBytes)))
	if fp := rt.Compacted; fp != nil {
		p("  disk, compacted        %10.0f B/event (%.0f MiB; reopened and compacted whole in %.1fs)", fp.BytesPerEvt, mib(uint64(fp.DiskBytes)), fp.Seconds)
	}
	gc := rt.GroupCommit
	p("  group commit           %10d commits, %.1f requests and %.1f events each", gc.Commits, gc.RequestsPerCommit, gc.EventsPerCommit)
	p("  commit time            %s", lat(gc.CommitTime))
	if raw := r.RawPebble; raw != nil {
		p("")
		p("baseline (a): one synced Pebble Set per event, %d writers, no actor, no group commit", raw.Writers)
		p("  events/s               %10.0f   (%d events in %.1fs)", raw.EventsPerSec, raw.Events, raw.Seconds)
		p("  Set ack                %s", lat(raw.SetAck))
		p("  CPU                    %10.1f us/event (%.0f%% of one core)", raw.CPUPerEvent, 100*raw.CPUUtil)
		p("  peak RSS               %10.0f MiB", mib(raw.PeakRSS))
		p("  disk                   %10.0f B/event", raw.BytesPerEvt)
		if fp := raw.Compacted; fp != nil {
			p("  disk, compacted        %10.0f B/event (%.0f MiB; reopened and compacted whole in %.1fs)", fp.BytesPerEvt, mib(uint64(fp.DiskBytes)), fp.Seconds)
		}
	}
	if seed := r.SeedPG; seed != nil {
		p("")
		p("baseline (a): the seed's design on the same PostgreSQL, one transaction per event, %d writers, %d connections", seed.Writers, seedPoolSize)
		p("  events/s               %10.0f   (%d events in %.1fs)", seed.EventsPerSec, seed.Events, seed.Seconds)
		p("  commit ack             %s", lat(seed.SetAck))
		p("  CPU (client)           %10.1f us/event (%.0f%% of one core)", seed.CPUPerEvent, 100*seed.CPUUtil)
	}
	if rev := r.Revival; rev != nil {
		p("")
		p("baseline (b): revival, %d samples each (Kill, then the next Send served)", rev.Samples)
		p("  latency ms                  p50      p99    p99.9      max")
		p("  %-7d events         %s", rev.Events, lat(rev.LongRevival))
		p("  100 events             %s", lat(rev.ShortRevival))
		p("  warm Send (no kill)    %s", lat(rev.WarmSend))
		p("  LoadSince+Rebuild      %s   (store read, long conversation)", lat(rev.LongLoadSince))
		p("  full replay+Rebuild    %s   (store read of all %d events)", lat(rev.FullReplay), rev.Events)
	}
	if len(r.OpenLoop) > 0 {
		p("")
		p("open loop: turns arrive at the offered rate (Poisson), whatever is acknowledged; acks count from the arrival")
		p("  offered            events/s served   Send ack p50      p99    p99.9   event ack p99   overflow")
		for _, o := range r.OpenLoop {
			x := o.Result
			p("  %3.0f%% %8.0f/s   %10.0f      %8.2f %8.2f %8.2f        %8.2f   %8d",
				100*o.Fraction, o.Offered, x.EventsPerSec, x.SendAck.P50, x.SendAck.P99, x.SendAck.P999, x.EventAck.P99, x.Overflow)
			if n := o.Naive; n != nil {
				p("       naive Sets   %10.0f      %8.2f %8.2f %8.2f   (Set ack from arrival)", n.EventsPerSec, n.SetAck.P50, n.SetAck.P99, n.SetAck.P999)
			}
		}
	}
	if sg := r.Single; sg != nil {
		p("")
		p("one busy conversation: sequential Appends of one event, each synced, against a naive synced Pebble Set per event")
		p("  round   Append events/s  us/event  ack p50 ms   Set events/s  us/event  ack p50 ms   Append/Set")
		for i, x := range sg.Rounds {
			p("  %5d   %15.0f  %8.1f  %10.3f   %12.0f  %8.1f  %10.3f   %9.2fx",
				i+1, x.AppendPerSec, x.AppendCPU, x.AppendAck.P50, x.SetPerSec, x.SetCPU, x.SetAck.P50, x.AppendOverSets)
		}
		if x := sg.Runtime; x != nil {
			p("  runtime, one conversation: %.0f events/s; turn latency ms %s", x.EventsPerSec, lat(x.TurnLatency))
			p("  runtime, one conversation: Send ack ms %s", lat(x.SendAck))
		}
	}
	q := r.Ratios
	p("")
	p("ratios (same run)")
	if r.RawPebble != nil {
		p("  events/s, runtime / baseline (a)            %8.2fx", q.EventsVsRaw)
		p("  ack p99, runtime Send / baseline (a) Set    %8.2fx", q.SendP99VsRawP99)
	}
	if r.SeedPG != nil {
		p("  events/s, runtime / seed design on PG       %8.2fx", q.EventsVsSeed)
	}
	if r.Revival != nil {
		p("  revival p50, long / 100 events              %8.2fx", q.LongVsShortRevival)
		p("  revival p50, long / warm Send               %8.2fx", q.LongRevivalVsWarm)
		p("  full replay / revival p50                   %8.0fx", q.ReplayOverRevival)
		p("  full replay / LoadSince p50 (store reads)   %8.0fx", q.ReplayOverLoadSince)
	}
	p("")
	p("performance targets (BENCHMARKS.md)")
	for _, t := range r.Targets {
		mark := "met"
		if !t.Met {
			mark = "MISSED"
		}
		p("  %-40s %-9s %10.2f %-8s %s", t.Name, t.Want, t.Measured, t.Unit, mark)
	}
}
