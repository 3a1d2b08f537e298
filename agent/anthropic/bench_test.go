package anthropic_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/lazarusrt/lazarus/agent/anthropic"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/providertest"
)

// benchStream is a streamed answer of n text deltas in the wire format of
// the recorded transcripts (testdata/text.txt): message_start, a text
// block of n text_delta events of one word each, message_delta with the
// stop reason and usage, message_stop.
func benchStream(n int) []byte {
	var b strings.Builder
	b.WriteString("event: message_start\n" + `data: {"type": "message_start", "message": {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 120, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}}` + "\n\n")
	b.WriteString("event: content_block_start\n" + `data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}` + "\n\n")
	b.WriteString("event: ping\n" + `data: {"type": "ping"}` + "\n\n")
	for i := range n {
		fmt.Fprintf(&b, "event: content_block_delta\n"+`data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "word%d "}}`+"\n\n", i)
	}
	b.WriteString("event: content_block_stop\n" + `data: {"type": "content_block_stop", "index": 0}` + "\n\n")
	fmt.Fprintf(&b, "event: message_delta\n"+`data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": %d}}`+"\n\n", n)
	b.WriteString("event: message_stop\n" + `data: {"type": "message_stop"}` + "\n\n")
	return []byte(b.String())
}

// rawParams is, written by hand against the SDK, the request the provider
// renders from providertest.Turn with System "Be brief.".
func rawParams() sdk.MessageNewParams {
	return sdk.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: anthropic.DefaultMaxTokens,
		System:    []sdk.TextBlockParam{{Text: "Be brief."}, {Text: openai.SummaryPrefix + "The user lives in Paris."}},
		Messages: []sdk.MessageParam{
			sdk.NewUserMessage(sdk.NewTextBlock("What is the weather?")),
			sdk.NewAssistantMessage(sdk.NewToolUseBlock("call_runtime1", json.RawMessage(`{"city":"Paris"}`), "get_weather")),
			sdk.NewUserMessage(sdk.NewToolResultBlock("call_runtime1", `{"temp":21}`, false)),
		},
		Tools: []sdk.ToolUnionParam{
			{OfTool: &sdk.ToolParam{Name: "get_time", Description: sdk.String("Current time in a zone."),
				InputSchema: sdk.ToolInputSchemaParam{Properties: map[string]any{"tz": map[string]any{"type": "string"}}}}},
			{OfTool: &sdk.ToolParam{Name: "get_weather", Description: sdk.String("Weather in a city."),
				InputSchema: sdk.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}}},
		},
	}
}

// BenchmarkOverhead compares the provider with the raw SDK consuming the
// same transcript (providertest.Compare: interleaved, each timed alone):
//
//   - ours: Model.Generate on providertest.Turn (a summary, a user message,
//     a tool call and its result, two tools) with System "Be brief.":
//     the request rendered from the Turn, every delta to onDelta, the
//     block, usage and stop-reason bookkeeping, the AssistantMessage built;
//   - raw: the SDK's NewStreaming with the same request written by hand
//     once (rawParams), each text_delta appended to a strings.Builder and
//     counted, Err and Close.
//
// deltas=1000 gives the per-delta figure (the turn's fixed cost is under
// 2% of it); deltas=1 the per-turn one.
func BenchmarkOverhead(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("deltas=%d", n), func(b *testing.B) {
			srv := providertest.ServeStream(b, benchStream(n))
			m, err := anthropic.New(anthropic.Options{Model: "claude-sonnet-4-5", BaseURL: srv.URL, APIKey: "k", System: "Be brief."})
			if err != nil {
				b.Fatal(err)
			}
			client := sdk.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("k"), option.WithMaxRetries(0))
			params := rawParams()
			turn := providertest.Turn()
			seen := 0
			ours := func() error {
				seen = 0
				msg, err := m.Generate(context.Background(), turn, func(string) { seen++ })
				if err == nil && (seen != n || msg.GetUsage().GetOutputTokens() != int64(n)) {
					err = fmt.Errorf("provider: %d deltas, usage %v; want %d", seen, msg.GetUsage(), n)
				}
				return err
			}
			raw := func() error {
				seen = 0
				stream := client.Messages.NewStreaming(context.Background(), params)
				defer stream.Close()
				var text strings.Builder
				for stream.Next() {
					ev := stream.Current()
					if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" {
						text.WriteString(ev.Delta.Text)
						seen++
					}
				}
				if err := stream.Err(); err != nil {
					return err
				}
				if seen != n {
					return fmt.Errorf("raw SDK: %d deltas, want %d", seen, n)
				}
				return nil
			}
			providertest.Compare(b, n, ours, raw)
		})
	}
}
