package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent/providertest"
)

// TestLiveDemoOnAnOpenAICompatibleServer runs --model openai against a local
// server that answers every call with a streamed text: the demo kills the
// conversation mid-answer, restarts the runtime, and its checks hold.
func TestLiveDemoOnAnOpenAICompatibleServer(t *testing.T) {
	rs, err := providertest.Load("../../agent/openai/testdata/text.txt")
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { providertest.Write(w, rs[0]) }))
	defer srv.Close()
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	t.Setenv("OPENAI_API_KEY", "k")
	t.Setenv("OPENAI_MODEL", "local-model")
	var stdout, stderr bytes.Buffer
	code := cli(context.Background(), []string{"--model", "openai", "--dir", t.TempDir() + "/store"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	assert.Contains(t, stdout.String(), "check: the log holds 2 questions and 2 answers")
}

func TestLiveDemoNeedsAModelName(t *testing.T) {
	t.Setenv("OPENAI_MODEL", "")
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitFailed, cli(context.Background(), []string{"--model", "openai"}, &stdout, &stderr))
	assert.Equal(t, exitUsage, cli(context.Background(), []string{"--model", "nope"}, &stdout, &stderr))
}
