package openai_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/providertest"
)

// benchDeltas is the number of text deltas of the benchmark's answer.
const benchDeltas = 200

// benchServer serves one answer of benchDeltas deltas to every request.
func benchServer(b *testing.B) *httptest.Server {
	var body strings.Builder
	for i := 0; i < benchDeltas; i++ {
		fmt.Fprintf(&body, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"word%d "},"finish_reason":null}]}`+"\n\n", i)
	}
	body.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n")
	body.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":200,"total_tokens":210}}` + "\n\ndata: [DONE]\n\n")
	r := providertest.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: []byte(body.String())}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { providertest.Write(w, r) }))
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkTurn is one streamed turn of benchDeltas deltas through the
// provider (request rendering, deltas, assembly, usage).
func BenchmarkTurn(b *testing.B) {
	srv := benchServer(b)
	m, err := openai.New(openai.Options{Model: "m", BaseURL: srv.URL, APIKey: "k"})
	if err != nil {
		b.Fatal(err)
	}
	turn := providertest.Turn()
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Generate(context.Background(), turn, func(string) { n++ }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchDeltas), "ns/delta")
}

// BenchmarkTurnRawSDK consumes the same transcript with the SDK alone: the
// same request, the text accumulated, nothing else.
func BenchmarkTurnRawSDK(b *testing.B) {
	srv := benchServer(b)
	client := oai.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("k"), option.WithMaxRetries(0))
	params := oai.ChatCompletionNewParams{Model: "m", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("What is the weather?")},
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}}
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		stream := client.Chat.Completions.NewStreaming(context.Background(), params)
		var text strings.Builder
		for stream.Next() {
			c := stream.Current()
			for _, ch := range c.Choices {
				text.WriteString(ch.Delta.Content)
				n++
			}
		}
		if err := stream.Err(); err != nil {
			b.Fatal(err)
		}
		stream.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchDeltas), "ns/delta")
}
