package openai_test

import (
	"net/http"
	"testing"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/providertest"
)

// TestRuntime drives a Runtime on the OpenAI provider through a kill
// during a streamed answer and a broken stream (providertest.RunRuntime).
func TestRuntime(t *testing.T) {
	providertest.RunRuntime(t, providertest.RuntimeCase{
		Dir: "testdata",
		New: func(url string) (agent.Model, error) {
			return openai.New(openai.Options{Model: "gpt-4o-mini", BaseURL: url, APIKey: "k"})
		},
		Partial: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Partial"},"finish_reason":null}]}` + "\n\n"))
		},
	})
}
