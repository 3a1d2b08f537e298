package journal

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/messages"
)

// FuzzErrorFromProto decodes an Error of arbitrary bytes (a peer's reply,
// any code a newer or broken peer sends) with ErrorFromProto: it never
// panics, keeps the message, wraps exactly the sentinels (and context
// errors) of the codes it knows among code and also, and ErrorToProto of
// the result names those codes again. In a plain `go test` only the seeds
// run.
func FuzzErrorFromProto(f *testing.F) {
	for _, e := range []*messages.Error{
		{},
		{Code: messages.ErrorCode_ERROR_CODE_INTERNAL, Message: "x"},
		{Code: messages.ErrorCode_ERROR_CODE_CLOSED, Also: []messages.ErrorCode{messages.ErrorCode_ERROR_CODE_NO_SPACE}},
		{Code: 1 << 20, Also: []messages.ErrorCode{-1, messages.ErrorCode_ERROR_CODE_CANCELED, messages.ErrorCode_ERROR_CODE_CANCELED}},
		{Code: messages.ErrorCode_ERROR_CODE_UNKNOWN_OUTCOME, Also: []messages.ErrorCode{messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED}, Message: "late"},
	} {
		b, err := proto.Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var e messages.Error
		if proto.Unmarshal(b, &e) != nil {
			return
		}
		err := ErrorFromProto(&e)
		if err == nil || err.Error() != e.GetMessage() {
			t.Fatalf("%v came back as %v", &e, err)
		}
		named := append([]messages.ErrorCode{e.GetCode()}, e.GetAlso()...)
		var want []messages.ErrorCode
		for _, c := range codes {
			if errors.Is(err, c.err) != slices.Contains(named, c.code) {
				t.Fatalf("%v came back as %v: wraps %v is %v", &e, err, c.err, errors.Is(err, c.err))
			}
			if slices.Contains(named, c.code) {
				want = append(want, c.code)
			}
		}
		back := ErrorToProto(err)
		got := append([]messages.ErrorCode{back.GetCode()}, back.GetAlso()...)
		if len(want) == 0 {
			want = []messages.ErrorCode{messages.ErrorCode_ERROR_CODE_INTERNAL}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) || back.GetMessage() != e.GetMessage() {
			t.Fatalf("%v came back as %v, sent again as %v", &e, err, back)
		}
	})
}
