package snapshot_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
	"github.com/stretchr/testify/require"
)

// refSummarize is the first implementation of Deterministic.Summarize (build
// the whole body, hash it, cut it), kept as the oracle of the streaming one.
// It assumes valid input: the rejections are tested separately.
func refSummarize(maxBytes int, prev *messages.Summary, events []*messages.Event) string {
	from := events[0].GetSeq()
	if prev != nil {
		from = prev.GetFromSeq()
	}
	to := events[len(events)-1].GetSeq()

	var b strings.Builder
	if prev != nil {
		body := prev.GetContent()
		if prev.GetVersion() == snapshot.DeterministicVersion {
			if _, rest, ok := strings.Cut(body, "\n"); ok {
				body = rest
			} else {
				body = ""
			}
		}
		if body != "" {
			b.WriteString(body)
			b.WriteByte('\n')
		}
	}
	for _, ev := range events {
		b.WriteString(refDescribe(ev))
		b.WriteByte('\n')
	}
	body := strings.TrimSuffix(b.String(), "\n")
	sum := sha256.Sum256([]byte(body))
	header := fmt.Sprintf("deterministic summary of seq %d..%d, sha256 %s", from, to, hex.EncodeToString(sum[:8]))

	limit := maxBytes
	if limit == 0 {
		limit = snapshot.DefaultDeterministicMaxBytes
	}
	if room := limit - len(header) - 1; limit > 0 && len(body) > room {
		body = refCutFront(body, room)
	}
	content := header
	if body != "" {
		content += "\n" + body
	}
	return content
}

func refCutFront(body string, room int) string {
	const mark = "...\n"
	if room <= len(mark) {
		return ""
	}
	start := len(body) - (room - len(mark))
	if body[start-1] != '\n' {
		if i := strings.IndexByte(body[start:], '\n'); i >= 0 {
			start += i + 1
		} else {
			for start < len(body) && !utf8.RuneStart(body[start]) {
				start++
			}
		}
	}
	return mark + body[start:]
}

func refOneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func refText(parts []*messages.ContentPart) string {
	var b strings.Builder
	for _, p := range parts {
		switch {
		case p.GetImage() != nil:
			b.WriteString("<image>")
		case p.GetFile() != nil:
			b.WriteString("<file>")
		default:
			b.WriteString(p.GetText())
		}
	}
	return refOneLine(b.String())
}

func refDescribe(ev *messages.Event) string {
	prefix := fmt.Sprintf("[%d] ", ev.GetSeq())
	switch body := ev.GetBody().(type) {
	case *messages.Event_UserMsg:
		return prefix + "user: " + refText(body.UserMsg.GetContent())
	case *messages.Event_AssistantMsg:
		s := prefix + "assistant: " + refText(body.AssistantMsg.GetContent())
		for _, c := range body.AssistantMsg.GetToolCalls() {
			s += fmt.Sprintf(" [call %s %s]", refOneLine(c.GetName()), refOneLine(c.GetArguments()))
		}
		return s
	case *messages.Event_ToolResult:
		tr := body.ToolResult
		if e := tr.GetOutcome().GetError(); e != nil {
			return fmt.Sprintf("%stool %s error (%s): %s", prefix, refOneLine(tr.GetName()), refOneLine(e.GetCode()), refOneLine(e.GetMessage()))
		}
		return fmt.Sprintf("%stool %s: %s", prefix, refOneLine(tr.GetName()), refOneLine(tr.GetOutcome().GetContent()))
	case *messages.Event_ToolCall:
		c := body.ToolCall.GetCall()
		return fmt.Sprintf("%scall %s %s", prefix, refOneLine(c.GetName()), refOneLine(c.GetArguments()))
	case *messages.Event_Suspension:
		return prefix + "suspension"
	case *messages.Event_Resolution:
		return prefix + "resolution"
	case *messages.Event_Rewind:
		return fmt.Sprintf("%srewind to %d", prefix, body.Rewind.GetToSeq())
	case *messages.Event_TurnFailed:
		return fmt.Sprintf("%sturn failed (%s)", prefix, refOneLine(body.TurnFailed.GetCode()))
	case *messages.Event_Handoff:
		from := body.Handoff.GetFrom()
		if from == "" {
			from = "default"
		}
		return fmt.Sprintf("%shandoff from %s: %s", prefix, refOneLine(from), refOneLine(body.Handoff.GetMessage()))
	default:
		return prefix + "unknown"
	}
}

func parts(ps ...*messages.ContentPart) *messages.Event {
	return &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: ps}}}
}

func textPart(s string) *messages.ContentPart {
	return &messages.ContentPart{Part: &messages.ContentPart_Text{Text: s}}
}

func imagePart() *messages.ContentPart {
	return &messages.ContentPart{Part: &messages.ContentPart_Image{Image: &messages.Blob{MediaType: "image/png"}}}
}

func filePart() *messages.ContentPart {
	return &messages.ContentPart{Part: &messages.ContentPart_File{File: &messages.Blob{MediaType: "text/plain"}}}
}

// asstCalls is an assistant message with text and calls of (name, args)
// pairs, kept raw (names and arguments may hold newlines).
func asstCalls(text string, nameArgs ...string) *messages.Event {
	msg := &messages.AssistantMessage{Content: []*messages.ContentPart{textPart(text)}}
	for i := 0; i+1 < len(nameArgs); i += 2 {
		msg.ToolCalls = append(msg.ToolCalls, &messages.ToolCall{Id: fmt.Sprint("c", i), Name: nameArgs[i], Arguments: nameArgs[i+1]})
	}
	return &messages.Event{Body: &messages.Event_AssistantMsg{AssistantMsg: msg}}
}

// variety is one event of each kind the format distinguishes, with
// newlines, multi-byte runes and blobs, numbered from start.
func variety(start uint64) []*messages.Event {
	callNL := call("n")
	callNL.GetToolCall().Call.Arguments = "{\n\"a\": \"é\"\n}"
	resNL := result("n", "line one\nline two ✓")
	resNL.GetToolResult().Name = "odd\nname"
	return log(start,
		user("hello\nthere ünïcödé"),
		parts(textPart("look: "), imagePart(), textPart("\nand "), filePart(), textPart("ok")),
		parts(),
		asstCalls("thinking\n", "search", "{\"q\":\n\"x\"}", "multi\nline", ""),
		asst(""),
		callNL,
		resNL,
		toolError("h1", "expired\ncode", "no\nanswer 日本"),
		&messages.Event{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: "z", Name: "empty"}}},
		suspension("h1"),
		resolution("h1"),
		rewind(start),
		unknown(),
		&messages.Event{Body: &messages.Event_UserMsg{}},
		&messages.Event{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{}}},
		user(strings.Repeat("日本語", 40)),
	)
}

func TestDeterministicMatchesReference(t *testing.T) {
	ctx := context.Background()
	detPrev, err := snapshot.Deterministic{}.Summarize(ctx, "conv", nil, variety(1))
	require.NoError(t, err)
	cases := []struct {
		name   string
		prev   *messages.Summary
		events []*messages.Event
	}{
		{"no prev, one event", nil, log(1, user("a"))},
		{"no prev, variety", nil, variety(1)},
		{"high seqs", nil, variety(18_446_744_073_709_551_000)},
		{"deterministic prev", detPrev, variety(17)},
		{"deterministic prev, header only", &messages.Summary{FromSeq: 1, ToSeq: 4, Content: "deterministic summary of seq 1..4, sha256 0011223344556677", Version: snapshot.DeterministicVersion}, log(5, user("c"))},
		{"deterministic prev, empty body", &messages.Summary{FromSeq: 1, ToSeq: 4, Content: "header\n", Version: snapshot.DeterministicVersion}, log(5, user("c"))},
		{"deterministic prev, empty content", &messages.Summary{FromSeq: 2, ToSeq: 4, Version: snapshot.DeterministicVersion}, log(5, user("c"))},
		{"foreign prev", &messages.Summary{FromSeq: 1, ToSeq: 4, Content: "The user asked\nabout X ✓.", Version: "llm/7"}, variety(5)},
		{"foreign prev ending in a newline", &messages.Summary{FromSeq: 1, ToSeq: 4, Content: "text\n\n", Version: "llm/7"}, log(5, user("c"))},
		{"foreign prev, empty content", &messages.Summary{FromSeq: 3, ToSeq: 4, Version: "llm/7"}, log(5, user("c"))},
		{"long single line", nil, log(1, user(strings.Repeat("é日a", 300)))},
		{"lines longer than a hash chunk", &messages.Summary{FromSeq: 1, ToSeq: 4, Content: strings.Repeat("x\n", 20_000), Version: "llm/7"}, log(5, user("a"), result("c", strings.Repeat("ab\n日", 5000)), asst("done"))},
		{"long foreign prev, no newline", &messages.Summary{FromSeq: 1, ToSeq: 4, Content: strings.Repeat("ü", 5000), Version: "llm/7"}, log(5, user("c"))},
	}
	limits := []int{-1, 0, 1, 2, 50, 60, 64, 65, 66, 70, 80, 100, 200, 333, 1000, 4096, 100_000}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, bound := range limits {
				checkAgainstReference(t, bound, tc.prev, tc.events)
			}
			// Every cut position of this input, or of its end when it is long.
			full := len(refSummarize(-1, tc.prev, tc.events))
			for bound := 1; bound <= full+2; bound++ {
				if bound > 4000 && bound < full-200 {
					bound = full - 200
				}
				checkAgainstReference(t, bound, tc.prev, tc.events)
			}
		})
	}
}

func checkAgainstReference(t *testing.T, maxBytes int, prev *messages.Summary, events []*messages.Event) {
	t.Helper()
	var prevCopy *messages.Summary
	if prev != nil {
		prevCopy = &messages.Summary{FromSeq: prev.GetFromSeq(), ToSeq: prev.GetToSeq(), Content: prev.GetContent(), Version: prev.GetVersion()}
	}
	got, err := snapshot.Deterministic{MaxBytes: maxBytes}.Summarize(context.Background(), "conv", prev, events)
	require.NoError(t, err)
	require.Equal(t, refSummarize(maxBytes, prev, events), got.GetContent(), "MaxBytes %d", maxBytes)
	from := events[0].GetSeq()
	if prev != nil {
		from = prev.GetFromSeq()
		require.Equal(t, prevCopy.GetContent(), prev.GetContent(), "prev is not modified")
	}
	require.Equal(t, from, got.GetFromSeq())
	require.Equal(t, events[len(events)-1].GetSeq(), got.GetToSeq())
	require.Equal(t, snapshot.DeterministicVersion, got.GetVersion())
	require.Nil(t, got.GetCreated())
}

// TestDeterministicMatchesReferenceRandom compares random inputs (texts of
// newlines and multi-byte runes, long results, random bounds) with the
// reference; the seed is printed on failure.
func TestDeterministicMatchesReferenceRandom(t *testing.T) {
	seed := uint64(20260101)
	r := rand.New(rand.NewPCG(seed, seed))
	alphabet := []string{"a", "b", " ", "\n", "é", "日本", "✓", "{", "\"", "🙂"}
	str := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	for i := range 300 {
		n := 1 + r.IntN(40)
		evs := make([]*messages.Event, n)
		for j := range evs {
			switch r.IntN(6) {
			case 0:
				evs[j] = user(str(r.IntN(200)))
			case 1:
				evs[j] = asstCalls(str(r.IntN(300)), str(r.IntN(5)), str(r.IntN(50)))
			case 2:
				evs[j] = result("c", str(r.IntN(5000)))
			case 3:
				evs[j] = toolError("c", str(r.IntN(4)), str(r.IntN(100)))
			case 4:
				evs[j] = parts(textPart(str(r.IntN(30))), imagePart(), filePart())
			default:
				evs[j] = suspension("c")
			}
		}
		start := uint64(1 + r.IntN(1000))
		evs = log(start, evs...)
		var prev *messages.Summary
		switch r.IntN(3) {
		case 1:
			prev = &messages.Summary{FromSeq: 1, ToSeq: start - 1, Content: "deterministic summary\n" + str(r.IntN(3000)), Version: snapshot.DeterministicVersion}
		case 2:
			prev = &messages.Summary{FromSeq: 1, ToSeq: start - 1, Content: str(r.IntN(3000)), Version: "llm/1"}
		}
		if prev != nil && prev.GetToSeq() == 0 {
			prev = nil
		}
		maxBytes := r.IntN(20_000) - 1000
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("seed %d, case %d", seed, i)
				}
			}()
			checkAgainstReference(t, maxBytes, prev, evs)
		})
	}
}

// loadTurn is one turn of the load generator's workload as a Plan hands it
// to a Summarizer (rendered events only): a user message, an assistant
// message with a call, its result and the final answer (~4 KB).
func loadTurn(seq uint64) []*messages.Event {
	res := result("c", `{"results":[`+strings.Repeat(`{"title":"a result","snippet":"some text about it"},`, 40)+`{}]}`)
	return log(seq,
		user(strings.Repeat("the user asks about something ", 13)),
		asstCalls(strings.Repeat("let me look that up for you ", 21), "search", `{"query":"`+strings.Repeat("q", 188)+`"}`),
		res,
		asst(strings.Repeat("here is what I found, in short ", 26)),
	)
}

// BenchmarkDeterministicSummarize folds 50 load generator turns (200
// rendered events, ~200 KB of text) into a previous Deterministic summary
// with the default bound, as the runtime does when Policy is due.
func BenchmarkDeterministicSummarize(b *testing.B) {
	ctx := context.Background()
	var evs []*messages.Event
	for i := range 50 {
		evs = append(evs, loadTurn(uint64(101+4*i))...)
	}
	var first []*messages.Event
	for i := range 25 {
		first = append(first, loadTurn(uint64(1+4*i))...)
	}
	d := snapshot.Deterministic{}
	prev, err := d.Summarize(ctx, "conv", nil, first)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Summarize(ctx, "conv", prev, evs); err != nil {
			b.Fatal(err)
		}
	}
}
