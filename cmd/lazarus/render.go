package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/render"
)

// age formats a non-negative duration rounded to the second ("3h2m1s").
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String()
}

// deadlineText says when a deadline falls relative to now: "in 23h59m",
// "overdue by 5s", or "none".
func deadlineText(ts *timestamppb.Timestamp, now time.Time) string {
	if ts == nil {
		return "none"
	}
	d := ts.AsTime().Sub(now)
	if d < 0 {
		return fmt.Sprintf("%s (overdue by %s)", stamp(ts), age(-d))
	}
	return fmt.Sprintf("%s (in %s)", stamp(ts), age(d))
}

// jsonOpts encode records for --json output and for the export format:
// field names as in the .proto files.
var jsonOpts = protojson.MarshalOptions{UseProtoNames: true}

// protoJSON encodes m with jsonOpts, compacted (protojson varies its
// whitespace on purpose; this makes the output stable).
func protoJSON(m proto.Message) (json.RawMessage, error) {
	b, err := jsonOpts.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// writeJSON writes v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// The event formatter lives in package render; these are its names here.

func eventLine(ev *messages.Event, full bool) string { return render.Event(ev, full) }
func quote(s string, full bool) string               { return render.Quote(s, full) }
func displayID(id string) string                     { return render.ID(id) }
func stamp(ts *timestamppb.Timestamp) string         { return render.Stamp(ts) }

func statusName(s messages.ConversationStatus) string {
	return render.ConversationStatus(s)
}
func callStatusName(s messages.ToolCallStatus) string { return render.ToolCallStatus(s) }
func executorName(e messages.Executor) string         { return render.Executor(e) }
