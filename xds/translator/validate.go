package translator

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
)

type validatorAll interface{ ValidateAll() error }

// Validate runs the protoc-gen-validate rules on m and, because ValidateAll
// does not descend into google.protobuf.Any, unpacks every Any inside it
// (typed_config and friends) and validates that too, recursively.
func Validate(m proto.Message) error { return newValidator().validate(m) }

// validator remembers the Any payloads it has validated: the pools of one
// config share most typed_configs byte for byte (filters, retry plugins), so
// each distinct payload is unpacked and checked once.
type validator struct {
	seen map[string]bool // type URL + payload already validated (cleanly)
}

func newValidator() *validator { return &validator{seen: map[string]bool{}} }

func (v *validator) validate(m proto.Message) error {
	var errs []error
	v.walk(m.ProtoReflect(), "", &errs)
	return errors.Join(errs...)
}

func (v *validator) walk(m protoreflect.Message, path string, errs *[]error) {
	if !m.IsValid() {
		return
	}
	msg := m.Interface()
	if a, ok := msg.(*anypb.Any); ok {
		key := a.TypeUrl + "\x00" + string(a.Value)
		if v.seen[key] {
			return
		}
		before := len(*errs)
		defer func() {
			if len(*errs) == before {
				v.seen[key] = true
			}
		}()
		inner, err := a.UnmarshalNew()
		if err != nil {
			if errors.Is(err, protoregistry.NotFound) {
				*errs = append(*errs, fmt.Errorf("%s: unknown type %s", path, a.TypeUrl))
			} else {
				*errs = append(*errs, fmt.Errorf("%s: %w", path, err))
			}
			return
		}
		v.walk(inner.ProtoReflect(), path+"<"+string(inner.ProtoReflect().Descriptor().FullName())+">", errs)
		return
	}
	if va, ok := msg.(validatorAll); ok {
		if err := va.ValidateAll(); err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w", nonEmpty(path), err))
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList():
			l := val.List()
			for i := 0; i < l.Len(); i++ {
				v.walk(l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i), errs)
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				val.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					v.walk(mv.Message(), fmt.Sprintf("%s[%v]", p, k.Interface()), errs)
					return true
				})
			}
		default:
			v.walk(val.Message(), p, errs)
		}
		return true
	})
}

func nonEmpty(p string) string {
	if p == "" {
		return "(root)"
	}
	return p
}
