package agent_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
)

func TestMessageConstructors(t *testing.T) {
	msg := agent.UserMessage(agent.TextPart("look"), agent.ImagePart("image/png", []byte{1, 2}, ""),
		agent.FilePart("a.pdf", "application/pdf", nil, "s3://b/a.pdf"))
	require.Len(t, msg.GetContent(), 3)
	require.Equal(t, "look", msg.GetContent()[0].GetText())
	require.Equal(t, []byte{1, 2}, msg.GetContent()[1].GetImage().GetData())
	require.Equal(t, "image/png", msg.GetContent()[1].GetImage().GetMediaType())
	require.Equal(t, "a.pdf", msg.GetContent()[2].GetFile().GetName())
	require.Equal(t, "s3://b/a.pdf", msg.GetContent()[2].GetFile().GetUri())

	r := agent.Reply("checking", agent.Call("lookup", `{"id":1}`))
	require.Equal(t, "checking", r.GetContent()[0].GetText())
	require.Equal(t, "lookup", r.GetToolCalls()[0].GetName())
	require.Equal(t, `{"id":1}`, r.GetToolCalls()[0].GetArguments())
	require.Empty(t, agent.Reply("").GetContent(), "no empty text part")
	require.Empty(t, agent.Text("done").GetToolCalls())
	require.Equal(t, "done", agent.Text("done").GetContent()[0].GetText())
}
