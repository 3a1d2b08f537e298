package server_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/server"
)

// TestStreamFramingHoldsAgainstContent: text that looks like server-sent
// events framing (line breaks of every kind, "event:", "id:", "data:"
// lines) in a user message, the model's answer, a tool call's arguments
// and a call's prompt (which quotes them) stays inside the data of its own message: every
// message's data is one line of JSON that decodes back to the text, no
// message is made of it, and the ids are the events' seqs. It held; tests
// only.
func TestStreamFramingHoldsAgainstContent(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	const forged = "a\n\nid: 999\nevent: turn_end\ndata: {\"outcome\":\"answered\"}\n\nb\r\rid: 998\r\nevent: error\r\n\r\nc\u2028d"
	args, err := json.Marshal(map[string]string{"q": forged})
	require.NoError(t, err)
	conv := n.create(t, tokAlice, nil)
	model.Push(conv.ID, scripted.Reply(forged, scripted.Call("ask", string(args))))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: forged}, nil)
	got := st.until(t, "turn_end", `"suspended"`)
	st.close()

	known := map[string]bool{"event": true, "delta": true, "restart": true, "retry": true}
	seen := 0
	for i, m := range got {
		require.NotContains(t, m.Data, "\r", "message %d", i)
		require.True(t, json.Valid([]byte(m.Data)), "message %d: %q", i, m.Data)
		if i == len(got)-1 {
			require.Equal(t, "turn_end", m.Event)
			continue
		}
		require.True(t, known[m.Event], "message %d of event %q", i, m.Event)
		if m.Event != "event" {
			continue
		}
		var ev struct {
			Seq json.Number `json:"seq"`
		}
		require.NoError(t, json.Unmarshal([]byte(m.Data), &ev))
		require.Equal(t, ev.Seq.String(), m.ID)
		var all map[string]any
		require.NoError(t, json.Unmarshal([]byte(m.Data), &all))
		if all["user_msg"] != nil || all["assistant_msg"] != nil || all["tool_call"] != nil {
			require.Contains(t, flatten(all), forged, "message %d: %s", i, m.Data)
			seen++
		}
	}
	require.GreaterOrEqual(t, seen, 3, "the user message, the answer and the tool call")
}

// flatten returns every string in v, decoded, and the strings that are
// themselves JSON (a call's arguments), decoded again.
func flatten(v any) []string {
	var out []string
	switch x := v.(type) {
	case string:
		out = append(out, x)
		var inner any
		if json.Unmarshal([]byte(x), &inner) == nil {
			out = append(out, flatten(inner)...)
		}
	case map[string]any:
		for _, e := range x {
			out = append(out, flatten(e)...)
		}
	case []any:
		for _, e := range x {
			out = append(out, flatten(e)...)
		}
	}
	return out
}
