package anthropic_test

import (
	"net/http"
	"testing"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/anthropic"
	"github.com/lazarusrt/lazarus/agent/providertest"
)

// TestRuntime drives a Runtime on the Anthropic provider through a kill
// during a streamed answer and a broken stream (providertest.RunRuntime).
func TestRuntime(t *testing.T) {
	providertest.RunRuntime(t, providertest.RuntimeCase{
		Dir: "testdata",
		New: func(url string) (agent.Model, error) {
			return anthropic.New(anthropic.Options{Model: "claude-sonnet-4-5", BaseURL: url, APIKey: "k"})
		},
		Partial: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("event: message_start\n" +
				`data: {"type":"message_start","message":{"id":"msg_k","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}}` + "\n\n" +
				"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
				"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Partial"}}` + "\n\n"))
		},
	})
}
