package messages_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/messages"
)

// TestUsageOldRecordReadsCacheCountsAsZero: a Usage written before the
// cache counts existed (fields 1 and 2 only) reads with both cache counts
// 0, and the counts it has as they were.
func TestUsageOldRecordReadsCacheCountsAsZero(t *testing.T) {
	var old []byte
	old = protowire.AppendTag(old, 1, protowire.VarintType)
	old = protowire.AppendVarint(old, 1234)
	old = protowire.AppendTag(old, 2, protowire.VarintType)
	old = protowire.AppendVarint(old, 56)
	var u messages.Usage
	require.NoError(t, proto.Unmarshal(old, &u))
	assert.True(t, proto.Equal(&messages.Usage{InputTokens: 1234, OutputTokens: 56}, &u), "%v", &u)
	assert.Zero(t, u.GetCacheReadInputTokens())
	assert.Zero(t, u.GetCacheCreationInputTokens())
}

// TestUsageCacheCountsRoundTrip: the cache counts are fields 3 and 4 on
// the wire and, in the protobuf JSON mapping with proto names (the HTTP
// API's), cache_read_input_tokens and cache_creation_input_tokens, int64
// as strings.
func TestUsageCacheCountsRoundTrip(t *testing.T) {
	u := &messages.Usage{InputTokens: 7, OutputTokens: 9, CacheReadInputTokens: 2000, CacheCreationInputTokens: 300}
	b, err := proto.Marshal(u)
	require.NoError(t, err)
	fields := map[protowire.Number]uint64{}
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		require.GreaterOrEqual(t, l, 0)
		require.Equal(t, protowire.VarintType, typ)
		b = b[l:]
		v, l := protowire.ConsumeVarint(b)
		require.GreaterOrEqual(t, l, 0)
		b = b[l:]
		fields[n] = v
	}
	assert.Equal(t, map[protowire.Number]uint64{1: 7, 2: 9, 3: 2000, 4: 300}, fields)
	j, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(u)
	require.NoError(t, err)
	assert.JSONEq(t, `{"input_tokens":"7","output_tokens":"9","cache_read_input_tokens":"2000","cache_creation_input_tokens":"300"}`, string(j))
}
