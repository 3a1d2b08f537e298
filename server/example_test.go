package server_test

import (
	"log"
	"net/http"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/server"
)

// ExampleNew mounts a Runtime's API, with its metrics, in an application's
// own HTTP server.
func ExampleNew() {
	metrics := server.NewMetrics()
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Metrics: metrics.Hooks()})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	tokens, err := server.NewBearerTokens(map[string]agent.Identity{
		"token-of-alice": {UserID: "alice"},
		"token-of-carol": {UserID: "carol", Roles: []string{"approver"}},
		"token-of-ops":   {UserID: "ops", Roles: []string{server.DefaultOperatorRole}},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", server.New(rt, server.Options{Authenticator: tokens, Metrics: metrics}))
	srv := &http.Server{Addr: "localhost:8080", Handler: mux}
	_ = srv // srv.ListenAndServe() serves it
}
