package journal

import (
	"fmt"
	"strconv"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Enum values.
//
// Proto3 enums are open: proto.Unmarshal accepts any number in an enum
// field, declared by the enum or not. No write of a Store stores an
// undeclared one (ValidateAppend, ValidateEvent, ValidateToolCall,
// ValidateFSMState, ValidateModelCall and ValidStatus refuse them), so one
// in stored bytes is damage or a foreign writer's record, and a reader
// that took it would act on a value no code handles: a tool call row of an
// unknown status is not terminal, so a revival would take the call as
// still open. The adapters that decode stored bytes (pebblejournal,
// pgjournal) check every record they decode with CheckEnums and return
// ErrCorrupt naming the record.

// CheckEnums returns an error naming the first enum field of m, at any
// depth (nested messages, list elements and map values, a oneof's set
// member), that holds a number its enum does not declare, and nil if there
// is none (or m is nil). The error gives the field's path from m, the
// number and the enum's name ("tool_call.executor holds 7, not a value of
// lazarus.v1.Executor"); it wraps no sentinel: the caller says whether the
// number is bad input (ErrInvalid) or damage (ErrCorrupt). Where a map
// holds more than one bad value, which one it names is unspecified.
//
// Only the fields that can lead to an enum are visited (for an event: its
// tool_call, suspension or resolution body), each message type's list of
// them computed once, so the check costs a few field lookups per record.
func CheckEnums(m proto.Message) error {
	if m == nil {
		return nil
	}
	pm := m.ProtoReflect()
	if !pm.IsValid() {
		return nil
	}
	if e := checkEnums(pm); e != nil {
		return e
	}
	return nil
}

// enumError is the error of CheckEnums. path is built as the error goes
// back up the message tree.
type enumError struct {
	path string
	num  protoreflect.EnumNumber
	enum protoreflect.FullName
}

func (e *enumError) Error() string {
	return fmt.Sprintf("%s holds %d, not a value of %s", e.path, e.num, e.enum)
}

// under prefixes the path of e with the field fd (and the element index,
// if any), and returns e.
func (e *enumError) under(fd protoreflect.FieldDescriptor, elem string) *enumError {
	p := string(fd.Name()) + elem
	if e.path != "" {
		p += "."
	}
	e.path = p + e.path
	return e
}

// checkEnums is CheckEnums on a valid message.
func checkEnums(m protoreflect.Message) *enumError {
	for _, fd := range enumFields(m.Descriptor()) {
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if e := checkValue(fd, l.Get(i)); e != nil {
					return e.under(fd, "["+strconv.Itoa(i)+"]")
				}
			}
		case fd.IsMap():
			vd := fd.MapValue()
			var bad *enumError
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if e := checkValue(vd, mv); e != nil {
					bad = e.under(fd, "["+strconv.Quote(k.String())+"]")
					return false
				}
				return true
			})
			if bad != nil {
				return bad
			}
		default:
			if e := checkValue(fd, v); e != nil {
				return e.under(fd, "")
			}
		}
	}
	return nil
}

// checkValue checks one value of fd's kind: an enum number, or a message
// checked in turn. The error's path is empty for the value itself.
func checkValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) *enumError {
	if fd.Kind() == protoreflect.EnumKind {
		ed := fd.Enum()
		if ed.Values().ByNumber(v.Enum()) == nil {
			return &enumError{num: v.Enum(), enum: ed.FullName()}
		}
		return nil
	}
	return checkEnums(v.Message())
}

// enumPlans caches, per message descriptor, the fields enumFields returns.
var enumPlans sync.Map // protoreflect.MessageDescriptor -> []protoreflect.FieldDescriptor

// enumFields returns the fields of md that are enums or messages (alone,
// in a list or as map values) from which an enum field can be reached.
func enumFields(md protoreflect.MessageDescriptor) []protoreflect.FieldDescriptor {
	if v, ok := enumPlans.Load(md); ok {
		return v.([]protoreflect.FieldDescriptor)
	}
	var out []protoreflect.FieldDescriptor
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if leadsToEnum(fd, map[protoreflect.MessageDescriptor]bool{}) {
			out = append(out, fd)
		}
	}
	enumPlans.Store(md, out)
	return out
}

// leadsToEnum reports whether fd's values (a map's values) are enums or
// messages from which an enum field can be reached; seen holds the
// messages already explored (records may nest their own type).
func leadsToEnum(fd protoreflect.FieldDescriptor, seen map[protoreflect.MessageDescriptor]bool) bool {
	if fd.IsMap() {
		fd = fd.MapValue()
	}
	switch fd.Kind() {
	case protoreflect.EnumKind:
		return true
	case protoreflect.MessageKind, protoreflect.GroupKind:
		md := fd.Message()
		if seen[md] {
			return false
		}
		seen[md] = true
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			if leadsToEnum(fields.Get(i), seen) {
				return true
			}
		}
	}
	return false
}
