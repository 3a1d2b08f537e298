package lazarus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Names of the built-in tools Options.ScheduleTools adds.
const (
	// ScheduleToolName schedules a wake-up of the calling conversation.
	// Arguments: {"text": "...", and one of "delay_seconds": n, "at":
	// "RFC 3339 time", "cron": "expr" (with "time_zone": "IANA name"),
	// optionally "every_seconds": n}. Result: {"schedule_id", "next"}.
	ScheduleToolName = "schedule_wakeup"
	// ListSchedulesToolName lists the calling conversation's schedules.
	// Result: a JSON array of {"schedule_id", "next", "text",
	// "every_seconds", "cron", "time_zone"}, ordered by schedule_id. When
	// they do not all fit agent.MaxResultBytes, the result is instead
	// {"wakeups": [the first ones that fit, by schedule_id], "omitted": n,
	// "note": "..."}, within that bound: a conversation may hold
	// journal.MaxSchedulesPerConversation schedules of texts up to
	// journal.MaxEventBytes, and a larger result would be a tool error.
	ListSchedulesToolName = "list_wakeups"
	// CancelScheduleToolName cancels one: {"schedule_id": "..."}.
	CancelScheduleToolName = "cancel_wakeup"
)

type scheduleArgs struct {
	Text         string  `json:"text"`
	DelaySeconds float64 `json:"delay_seconds"`
	At           string  `json:"at"`
	EverySeconds float64 `json:"every_seconds"`
	Cron         string  `json:"cron"`
	TimeZone     string  `json:"time_zone"`
}

type scheduleView struct {
	ID           string  `json:"schedule_id"`
	Next         string  `json:"next"`
	Text         string  `json:"text,omitempty"`
	EverySeconds float64 `json:"every_seconds,omitempty"`
	Cron         string  `json:"cron,omitempty"`
	TimeZone     string  `json:"time_zone,omitempty"`
}

func viewOf(sc *messages.Schedule) scheduleView {
	v := scheduleView{ID: sc.GetId(), Next: sc.GetNext().AsTime().Format(time.RFC3339), Cron: sc.GetCron(), TimeZone: sc.GetTimeZone()}
	if e := sc.GetEvery(); e != nil {
		v.EverySeconds = e.AsDuration().Seconds()
	}
	v.Text = ScheduleText(sc)
	return v
}

// listOmittedReserve is what listResult keeps, of its bound, for the
// object around a cut list: its keys, the count and the note.
const listOmittedReserve = 256

// listOmittedNote tells the model what a cut list_wakeups result means.
const listOmittedNote = "not every wake-up fits one result: cancel some to see the others"

// listResult is list_wakeups' result for schedules all (ordered by id):
// their views as a JSON array, or, when that is longer than maxBytes, the
// first views that fit with the count of the others, in an object of at
// most maxBytes.
func listResult(all []*messages.Schedule, maxBytes int) (string, error) {
	views := make([][]byte, 0, len(all))
	size := 2 // []
	for _, sc := range all {
		b, err := json.Marshal(viewOf(sc))
		if err != nil {
			return "", err
		}
		views = append(views, b)
		size += len(b) + 1 // and a comma
	}
	fits := len(views)
	if size > maxBytes {
		fits, size = 0, 0
		for _, b := range views {
			if size+len(b)+1 > maxBytes-listOmittedReserve {
				break
			}
			size += len(b) + 1
			fits++
		}
	}
	out := []byte("[")
	for i, b := range views[:fits] {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	out = append(out, ']')
	if fits == len(views) {
		return string(out), nil
	}
	rest, err := json.Marshal(struct {
		Omitted int    `json:"omitted"`
		Note    string `json:"note"`
	}{len(views) - fits, listOmittedNote})
	if err != nil {
		return "", err
	}
	return `{"wakeups":` + string(out) + `,` + string(rest[1:]), nil
}

// toolSeconds converts the seconds of a schedule tool's argument to a
// Duration; a value beyond its range (about 292 years either way) is
// ErrBadSchedule, not converted: a float conversion out of range is
// implementation-dependent in Go. So is a value other than 0 that is
// below a nanosecond, which would convert to 0, the absent argument.
func toolSeconds(name string, v float64) (time.Duration, error) {
	ns := v * float64(time.Second)
	if ns >= math.MaxInt64 || ns <= math.MinInt64 {
		return 0, badSchedule("%s: %v seconds is out of range", name, v)
	}
	if v != 0 && time.Duration(ns) == 0 {
		return 0, badSchedule("%s: %v seconds is below a nanosecond", name, v)
	}
	return time.Duration(ns), nil
}

// toolScheduleID returns the id of the schedule the schedule tool's call
// callID makes: "sch-" and the call's id, or, when that would be longer
// than an id may be (journal.MaxIDBytes), "sch-" and the SHA-256 of the
// call's id in hex. Either way one call id always names one schedule.
func toolScheduleID(callID string) string {
	if id := "sch-" + callID; len(id) <= journal.MaxIDBytes {
		return id
	}
	sum := sha256.Sum256([]byte(callID))
	return "sch-" + hex.EncodeToString(sum[:])
}

// scheduleTools returns the built-in schedule tools, bound to the Runtime
// rt returns (set once Open built it; the tools run only after).
func scheduleTools(rt func() *Runtime) []agent.Tool {
	server := messages.Executor_EXECUTOR_SERVER
	return []agent.Tool{
		{
			Name:     ScheduleToolName,
			Executor: server,
			Description: "Schedule a wake-up of this conversation: at each occurrence, text is sent to you as a new user message. " +
				"Give text and exactly one of delay_seconds, at (RFC 3339), cron (five fields, read in time_zone, default UTC); " +
				"every_seconds repeats (alone, or after delay_seconds or at).",
			Parameters: `{"type":"object","properties":{"text":{"type":"string"},"delay_seconds":{"type":"number"},"at":{"type":"string"},` +
				`"every_seconds":{"type":"number"},"cron":{"type":"string"},"time_zone":{"type":"string"}},"required":["text"]}`,
			Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
				var a scheduleArgs
				if err := json.Unmarshal([]byte(inv.Arguments), &a); err != nil {
					return "", fmt.Errorf("arguments: %w", err)
				}
				// The id comes from the call's: a re-run of the call (after
				// a crash) replaces the schedule rather than adding one.
				spec := ScheduleSpec{ID: toolScheduleID(inv.ToolCallID), Text: a.Text, Cron: a.Cron, TimeZone: a.TimeZone}
				var err error
				if spec.After, err = toolSeconds("delay_seconds", a.DelaySeconds); err != nil {
					return "", err
				}
				if spec.Every, err = toolSeconds("every_seconds", a.EverySeconds); err != nil {
					return "", err
				}
				if a.At != "" {
					at, err := time.Parse(time.RFC3339, a.At)
					if err != nil {
						return "", badSchedule("at: %v", err)
					}
					if at.IsZero() {
						// The first instant of year 1, which ScheduleSpec
						// would read as no At: a time in the past.
						return "", atInPast(at)
					}
					spec.At = at
				}
				sc, err := rt().Schedule(ctx, inv.ConversationID, spec, inv.Scope)
				if err != nil {
					return "", err
				}
				out, err := json.Marshal(viewOf(sc))
				return string(out), err
			},
		},
		{
			Name:     ListSchedulesToolName,
			Executor: server,
			Description: "List this conversation's scheduled wake-ups, ordered by schedule_id. " +
				"If they do not all fit one result, it lists the first ones under \"wakeups\" and says how many more there are under \"omitted\".",
			Parameters: `{"type":"object","properties":{}}`,
			Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
				all, err := rt().Schedules(ctx, inv.ConversationID)
				if err != nil {
					return "", err
				}
				return listResult(all, agent.MaxResultBytes)
			},
		},
		{
			Name:        CancelScheduleToolName,
			Executor:    server,
			Description: "Cancel one of this conversation's scheduled wake-ups by its schedule_id.",
			Parameters:  `{"type":"object","properties":{"schedule_id":{"type":"string"}},"required":["schedule_id"]}`,
			Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
				var a struct {
					ID string `json:"schedule_id"`
				}
				if err := json.Unmarshal([]byte(inv.Arguments), &a); err != nil {
					return "", fmt.Errorf("arguments: %w", err)
				}
				err := rt().CancelSchedule(ctx, inv.ConversationID, a.ID)
				if errors.Is(err, ErrNoSchedule) {
					return `{"cancelled":false}`, nil // a re-run after a crash finds it gone
				}
				if err != nil {
					return "", err
				}
				return `{"cancelled":true}`, nil
			},
		},
	}
}
