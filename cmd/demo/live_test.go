package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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

// TestLiveDemoRefusesADirectoryItCannotUse: --model openai holds --dir to
// the rules the flag documents for every demo: a directory that is not
// empty (here, an earlier live demo's store), or that cannot be created,
// is a usage error (status 2), said once, before any call to the model.
// The live demo used to open any --dir: on an earlier run's store it asked
// the model again and failed its check (status 1), and on a file it failed
// to open the store (status 1).
func TestLiveDemoRefusesADirectoryItCannotUse(t *testing.T) {
	rs, err := providertest.Load("../../agent/openai/testdata/text.txt")
	require.NoError(t, err)
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		providertest.Write(w, rs[0])
	}))
	defer srv.Close()
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	t.Setenv("OPENAI_API_KEY", "k")
	t.Setenv("OPENAI_MODEL", "local-model")
	store := filepath.Join(t.TempDir(), "store")
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, cli(context.Background(), []string{"--model", "openai", "--dir", store}, &stdout, &stderr), "stderr:\n%s", stderr.String())
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for dir, says := range map[string]string{store: "is not empty", file: "cannot be used", filepath.Join(file, "store"): "cannot be used"} {
		before := calls.Load()
		stdout.Reset()
		stderr.Reset()
		assert.Equal(t, exitUsage, cli(context.Background(), []string{"--model", "openai", "--dir", dir}, &stdout, &stderr), "--dir %s; stderr:\n%s", dir, stderr.String())
		assert.Contains(t, stderr.String(), "--dir "+dir+" ")
		assert.Contains(t, stderr.String(), says)
		assert.Equal(t, 1, strings.Count(stderr.String(), "demo:"), "said once:\n%s", stderr.String())
		assert.Equal(t, before, calls.Load(), "--dir %s: the model is not called", dir)
	}
}
