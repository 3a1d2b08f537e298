package messages_test

import (
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Black-box tests of the schema rules in the package doc.

var files = []protoreflect.FileDescriptor{
	messages.File_lazarus_v1_actor_proto, messages.File_lazarus_v1_agent_proto, messages.File_lazarus_v1_cluster_proto,
	messages.File_lazarus_v1_expiry_proto, messages.File_lazarus_v1_files_proto, messages.File_lazarus_v1_fork_proto,
	messages.File_lazarus_v1_journal_proto, messages.File_lazarus_v1_records_proto, messages.File_lazarus_v1_schedule_proto,
}

// TestBBEnumZeroIsUnspecified: rule 5, "Enum zero values are UNSPECIFIED",
// for every enum of every file, nested ones included.
func TestBBEnumZeroIsUnspecified(t *testing.T) {
	var check func(enums protoreflect.EnumDescriptors)
	n := 0
	check = func(enums protoreflect.EnumDescriptors) {
		for i := range enums.Len() {
			e := enums.Get(i)
			zero := e.Values().ByNumber(0)
			require.NotNil(t, zero, "%s has no zero value", e.FullName())
			require.True(t, strings.HasSuffix(string(zero.Name()), "_UNSPECIFIED"), "%s's zero value is %s", e.FullName(), zero.Name())
			n++
		}
	}
	var walk func(msgs protoreflect.MessageDescriptors)
	walk = func(msgs protoreflect.MessageDescriptors) {
		for i := range msgs.Len() {
			check(msgs.Get(i).Enums())
			walk(msgs.Get(i).Messages())
		}
	}
	for _, f := range files {
		check(f.Enums())
		walk(f.Messages())
	}
	require.Positive(t, n)
}

// TestBBUnknownEventBodyIsSkippable: rule 4, "readers that do not know it
// see an Event with no body": an Event carrying a body field this build
// does not know decodes, with its other fields, and no body.
func TestBBUnknownEventBodyIsSkippable(t *testing.T) {
	known, err := proto.Marshal(&messages.Event{Seq: 5, Agent: "a"})
	require.NoError(t, err)
	inner, err := proto.Marshal(&messages.UserMessage{})
	require.NoError(t, err)
	unknownNumber := protowire.Number(9999)
	require.Nil(t, (&messages.Event{}).ProtoReflect().Descriptor().Fields().ByNumber(unknownNumber))
	b := protowire.AppendTag(append([]byte(nil), known...), unknownNumber, protowire.BytesType)
	b = protowire.AppendBytes(b, append(inner, 1, 2, 3))
	var ev messages.Event
	require.NoError(t, proto.Unmarshal(b, &ev))
	require.EqualValues(t, 5, ev.GetSeq())
	require.Equal(t, "a", ev.GetAgent())
	require.Nil(t, ev.GetBody())
}
