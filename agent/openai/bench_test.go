package openai_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/providertest"
)

// benchStream is a streamed answer of n text deltas in the wire format of
// the recorded transcripts (testdata/text.txt): a role chunk, n content
// chunks of one word each, the finish chunk, the usage chunk, [DONE].
func benchStream(n int) []byte {
	const head = `data: {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_1", "choices": [`
	var b strings.Builder
	b.WriteString(head + `{"index": 0, "delta": {"role": "assistant", "content": "", "refusal": null}, "logprobs": null, "finish_reason": null}], "usage": null}` + "\n\n")
	for i := range n {
		fmt.Fprintf(&b, head+`{"index": 0, "delta": {"content": "word%d "}, "logprobs": null, "finish_reason": null}], "usage": null}`+"\n\n", i)
	}
	b.WriteString(head + `{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop"}], "usage": null}` + "\n\n")
	fmt.Fprintf(&b, head+`], "usage": {"prompt_tokens": 120, "completion_tokens": %d, "total_tokens": %d}}`+"\n\ndata: [DONE]\n\n", n, n+120)
	return []byte(b.String())
}

// rawParams is, written by hand against the SDK, the request the provider
// renders from providertest.Turn with System "Be brief.".
func rawParams() oai.ChatCompletionNewParams {
	return oai.ChatCompletionNewParams{
		Model:         "gpt-4o-mini",
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
		Messages: []oai.ChatCompletionMessageParamUnion{
			oai.SystemMessage("Be brief.\n\n" + openai.SummaryPrefix + "The user lives in Paris."),
			oai.UserMessage("What is the weather?"),
			{OfAssistant: &oai.ChatCompletionAssistantMessageParam{ToolCalls: []oai.ChatCompletionMessageToolCallUnionParam{{
				OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{ID: "call_runtime1",
					Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			}}}},
			oai.ToolMessage(`{"temp":21}`, "call_runtime1"),
		},
		Tools: []oai.ChatCompletionToolUnionParam{
			oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_time", Description: oai.String("Current time in a zone."),
				Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"tz": map[string]any{"type": "string"}}}}),
			oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Description: oai.String("Weather in a city."),
				Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}),
		},
	}
}

// BenchmarkOverhead compares the provider with the raw SDK consuming the
// same transcript (providertest.Compare: interleaved, each timed alone):
//
//   - ours: Model.Generate on providertest.Turn (a summary, a user message,
//     a tool call and its result, two tools) with System "Be brief.":
//     the request rendered from the Turn, every delta to onDelta, the
//     text, tool call and usage bookkeeping, the AssistantMessage built;
//   - raw: the SDK's NewStreaming with the same request written by hand
//     once (rawParams), each chunk's content appended to a strings.Builder
//     and counted, Err and Close.
//
// deltas=1000 gives the per-delta figure (the turn's fixed cost is under
// 2% of it); deltas=1 the per-turn one.
func BenchmarkOverhead(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("deltas=%d", n), func(b *testing.B) {
			srv := providertest.ServeStream(b, benchStream(n))
			m, err := openai.New(openai.Options{Model: "gpt-4o-mini", BaseURL: srv.URL, APIKey: "k", System: "Be brief."})
			if err != nil {
				b.Fatal(err)
			}
			client := oai.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("k"), option.WithMaxRetries(0))
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
				stream := client.Chat.Completions.NewStreaming(context.Background(), params)
				defer stream.Close()
				var text strings.Builder
				for stream.Next() {
					for _, ch := range stream.Current().Choices {
						if ch.Delta.Content != "" {
							text.WriteString(ch.Delta.Content)
							seen++
						}
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
