package server

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
)

// TestOpenAPIMatchesRoutes: every route the mux serves is in the OpenAPI
// document, and every operation of the document is served.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), NoResume: true})
	require.NoError(t, err)
	defer rt.Close()
	s := New(rt, Options{})

	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(OpenAPI(), &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."))
	var documented []string
	for path, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "post", "put", "patch", "delete", "head", "options":
				documented = append(documented, strings.ToUpper(method)+" "+path)
			case "parameters", "summary", "description":
			default:
				t.Errorf("unexpected key %q under %s", method, path)
			}
		}
	}
	// Every reference resolves.
	var whole map[string]any
	require.NoError(t, json.Unmarshal(OpenAPI(), &whole))
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if ref, ok := x.(string); ok && k == "$ref" {
					var node any = whole
					for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
						m, ok := node.(map[string]any)
						require.True(t, ok, "reference %s", ref)
						node, ok = m[part]
						require.True(t, ok, "reference %s does not resolve", ref)
					}
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(whole)

	served := slices.Clone(s.routes)
	slices.Sort(documented)
	slices.Sort(served)
	require.Equal(t, served, documented)
}
