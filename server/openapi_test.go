package server

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
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

// TestOpenAPISchemasMatchTypes: each schema of the OpenAPI document names
// exactly the JSON fields of the Go type the handlers encode or decode,
// its required fields are fields of it, a property is of format uint64
// exactly when its field is a uint64 (a seq), and a request body's schema
// allows no other field (the server refuses unknown fields).
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required             []string                   `json:"required"`
				Properties           map[string]json.RawMessage `json:"properties"`
				AdditionalProperties *bool                      `json:"additionalProperties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(OpenAPI(), &doc))
	types := map[string]struct {
		v       any
		request bool
	}{
		"Conversation":       {Conversation{}, false},
		"ConversationList":   {ConversationList{}, false},
		"CreateConversation": {CreateConversation{}, true},
		"Settings":           {Settings{}, true},
		"SendMessage":        {SendMessage{}, true},
		"Sent":               {Sent{}, false},
		"EndConversation":    {struct{}{}, true},
		"Rewind":             {RewindConversation{}, true},
		"Edit":               {EditMessage{}, true},
		"Fork":               {ForkConversation{}, true},
		"EventPage":          {EventPage{}, false},
		"Delta":              {DeltaData{}, false},
		"TurnEnd":            {TurnEndData{}, false},
		"Retry":              {RetryData{}, false},
		"Identity":           {Identity{}, false},
		"Call":               {Call{}, false},
		"CallList":           {CallList{}, false},
		"Resolve":            {Resolve{}, true},
		"Reject":             {Reject{}, true},
		"Answered":           {Answered{}, false},
		"CreateSchedule":     {CreateSchedule{}, true},
		"Schedule":           {Schedule{}, false},
		"ScheduleList":       {ScheduleList{}, false},
	}
	for name, ty := range types {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("no schema %s", name)
			continue
		}
		rt := reflect.TypeOf(ty.v)
		var fields []string
		for i := range rt.NumField() {
			tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if tag != "" && tag != "-" {
				fields = append(fields, tag)
				// A seq is a uint64: the document says so, and of
				// nothing else.
				var prop struct {
					Format string `json:"format"`
				}
				if raw, ok := schema.Properties[tag]; ok {
					require.NoError(t, json.Unmarshal(raw, &prop))
					ft := rt.Field(i).Type
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					assert.Equal(t, ft.Kind() == reflect.Uint64, prop.Format == "uint64",
						"schema %s, property %s of Go type %s: format %q", name, tag, ft, prop.Format)
				}
			}
		}
		documented := slices.Collect(maps.Keys(schema.Properties))
		slices.Sort(fields)
		slices.Sort(documented)
		assert.Equal(t, fields, documented, "the properties of schema %s", name)
		for _, r := range schema.Required {
			assert.Contains(t, fields, r, "schema %s requires a field %s has not", name, rt)
		}
		if ty.request {
			if assert.NotNil(t, schema.AdditionalProperties, "request schema %s: additionalProperties", name) {
				assert.False(t, *schema.AdditionalProperties, "request schema %s allows unknown fields, which the server refuses", name)
			}
		}
	}
}

// TestOpenAPICallOutcomes: the document's enum of Call.outcome is every
// value the server gives (callOutcomes), that of Answered.outcome the two
// a resolve and a reject give, and each is reached from a stored
// row: a rejection, a cancellation by a rewind and another error are told
// apart (all status "errored"), and a status the server does not know is
// "unknown", not a panic.
func TestOpenAPICallOutcomes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string `json:"required"`
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(OpenAPI(), &doc))
	call := doc.Components.Schemas["Call"]
	assert.Equal(t, callOutcomes, call.Properties["outcome"].Enum)
	assert.Contains(t, call.Required, "outcome")
	// The answer of a resolve or a reject says the outcome it gave.
	answered := doc.Components.Schemas["Answered"]
	assert.Equal(t, []string{CallAnswered, CallRejected}, answered.Properties["outcome"].Enum)
	assert.Contains(t, answered.Required, "outcome")

	errored := func(code string) *messages.ToolCallRecord {
		return &messages.ToolCallRecord{Status: messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED,
			Result: agent.ErrorOutcome(code, "no")}
	}
	rows := map[string]*messages.ToolCallRecord{
		CallPending: {Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING},
		CallAnswered: {Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
			Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{"approved":true}`}}},
		CallRejected:  errored(agent.CodeRejected),
		CallExpired:   {Status: messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, Result: actors.ExpiredOutcome()},
		CallCancelled: errored(agent.CodeCanceled),
		CallErrored:   errored(agent.CodeInvalid),
		CallUnknown:   {Status: messages.ToolCallStatus(99)},
	}
	for _, want := range callOutcomes {
		row, ok := rows[want]
		if assert.True(t, ok, "no stored row reaches outcome %q", want) {
			assert.Equal(t, want, callOf(row).Outcome)
		}
	}
	assert.Equal(t, CallErrored, callOutcome(&messages.ToolCallRecord{Status: messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED}), "errored without a result")
	assert.Equal(t, CallUnknown, callOutcome(&messages.ToolCallRecord{}), "no status")
	assert.Equal(t, CallUnknown, callOutcome(nil), "no row")
}
