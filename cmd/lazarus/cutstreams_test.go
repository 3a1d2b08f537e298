package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
)

// TestCutStreamsSaysClosed: the shutdown of lazarus serve ends the event
// streams with a cause wrapping lazarus.ErrClosed, which the server
// answers with the error message of code closed (package server); a
// stream that ends before (its client gone) has no such cause, and a
// request that is no stream is not cut.
func TestCutStreamsSaysClosed(t *testing.T) {
	streams, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	causes := make(chan error, 1)
	entered := make(chan struct{}, 1)
	h := cutStreams(streams, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
		causes <- context.Cause(r.Context())
	}))
	serve := func(ctx context.Context, path string) chan struct{} {
		done := make(chan struct{})
		req := httptest.NewRequestWithContext(ctx, "GET", path, nil)
		go func() {
			defer close(done)
			h.ServeHTTP(httptest.NewRecorder(), req)
		}()
		<-entered
		return done
	}

	// A client that goes away: its own cancellation, no ErrClosed.
	client, leave := context.WithCancel(context.Background())
	done := serve(client, "/v1/conversations/c/stream")
	leave()
	<-done
	require.False(t, errors.Is(<-causes, lazarus.ErrClosed))

	// A request that is no stream is not cut by the shutdown.
	other, endOther := context.WithCancel(context.Background())
	otherDone := serve(other, "/v1/conversations/c/events")

	done = serve(context.Background(), "/v1/conversations/c/stream")
	endStreams()
	<-done
	require.ErrorIs(t, <-causes, lazarus.ErrClosed)

	select {
	case <-otherDone:
		t.Fatal("a request that is no stream was cut")
	default:
	}
	endOther()
	<-otherDone
	require.False(t, errors.Is(<-causes, lazarus.ErrClosed))
}
