package server_test

import (
	"encoding/json"
	"io"
	"math"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/server"
)

// TestOpenAPIIntegerQueryParametersMatchTheParser: every integer query
// parameter of the OpenAPI document is accepted by the server at both ends
// of the range the document gives it (its minimum and maximum, else those
// of its format: a seq is a uint64) and refused one past either end (400,
// code invalid), so the document and the parser agree.
func TestOpenAPIIntegerQueryParametersMatchTheParser(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, _ := suspendOnApproval(t, ctx, n, model)

	type param struct {
		Name   string `json:"name"`
		In     string `json:"in"`
		Schema struct {
			Type    string   `json:"type"`
			Format  string   `json:"format"`
			Minimum *big.Int `json:"minimum"`
			Maximum *big.Int `json:"maximum"`
		} `json:"schema"`
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(server.OpenAPI(), &doc))
	formats := map[string][2]*big.Int{
		"":       {big.NewInt(math.MinInt64), big.NewInt(math.MaxInt64)}, // a Go int
		"int32":  {big.NewInt(math.MinInt32), big.NewInt(math.MaxInt32)},
		"int64":  {big.NewInt(math.MinInt64), big.NewInt(math.MaxInt64)},
		"uint64": {big.NewInt(0), new(big.Int).SetUint64(math.MaxUint64)},
	}
	checked := 0
	for path, item := range doc.Paths {
		var shared []param
		if raw, ok := item["parameters"]; ok {
			require.NoError(t, json.Unmarshal(raw, &shared))
		}
		for method, raw := range item {
			if method != "get" { // the operations with integer query parameters
				continue
			}
			var op struct {
				Parameters []param `json:"parameters"`
			}
			require.NoError(t, json.Unmarshal(raw, &op))
			for _, p := range append(shared, op.Parameters...) {
				if p.In != "query" || p.Schema.Type != "integer" {
					continue
				}
				bounds, ok := formats[p.Schema.Format]
				require.True(t, ok, "%s %s: format %q", path, p.Name, p.Schema.Format)
				lo, hi := bounds[0], bounds[1]
				if p.Schema.Minimum != nil {
					lo = p.Schema.Minimum
				}
				if p.Schema.Maximum != nil {
					hi = p.Schema.Maximum
				}
				target := strings.ReplaceAll(path, "{id}", conv.ID) + "?" + p.Name + "="
				var body []byte
				status := func(v *big.Int) int {
					req, err := http.NewRequestWithContext(ctx, strings.ToUpper(method), n.srv.URL+target+url.QueryEscape(v.String()), nil)
					require.NoError(t, err)
					req.Header.Set("Authorization", "Bearer "+tokOlga)
					res, err := n.srv.Client().Do(req)
					require.NoError(t, err)
					defer res.Body.Close()
					body = nil
					if res.StatusCode != http.StatusOK { // a stream is not read
						body, err = io.ReadAll(res.Body)
						require.NoError(t, err)
					}
					return res.StatusCode
				}
				one := big.NewInt(1)
				require.Equal(t, http.StatusOK, status(lo), "%s %s=%s (its documented minimum)", path, p.Name, lo)
				if strings.HasSuffix(path, "/stream") && p.Name == "after" {
					// Parsed, and refused as past the log's end (as
					// documented): no parse error.
					require.Equal(t, http.StatusBadRequest, status(hi), "%s %s=%s (its documented maximum)", path, p.Name, hi)
					require.Contains(t, string(body), "the log ends at seq", "%s %s=%s (its documented maximum)", path, p.Name, hi)
				} else {
					require.Equal(t, http.StatusOK, status(hi), "%s %s=%s (its documented maximum)", path, p.Name, hi)
				}
				require.Equal(t, http.StatusBadRequest, status(new(big.Int).Sub(lo, one)), "%s %s below its documented minimum", path, p.Name)
				require.Equal(t, http.StatusBadRequest, status(new(big.Int).Add(hi, one)), "%s %s above its documented maximum", path, p.Name)
				checked++
			}
		}
	}
	require.GreaterOrEqual(t, checked, 5, "limit (three listings), before, after")
}
