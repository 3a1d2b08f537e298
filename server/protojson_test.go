package server_test

import (
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func protojsonUnmarshal(b []byte, m proto.Message) error { return protojson.Unmarshal(b, m) }
