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
func Validate(m proto.Message) error {
	var errs []error
	walk(m.ProtoReflect(), "", &errs)
	return errors.Join(errs...)
}

func walk(m protoreflect.Message, path string, errs *[]error) {
	if !m.IsValid() {
		return
	}
	msg := m.Interface()
	if a, ok := msg.(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			if errors.Is(err, protoregistry.NotFound) {
				*errs = append(*errs, fmt.Errorf("%s: unknown type %s", path, a.TypeUrl))
			} else {
				*errs = append(*errs, fmt.Errorf("%s: %w", path, err))
			}
			return
		}
		walk(inner.ProtoReflect(), path+"<"+string(inner.ProtoReflect().Descriptor().FullName())+">", errs)
		return
	}
	if v, ok := msg.(validatorAll); ok {
		if err := v.ValidateAll(); err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w", nonEmpty(path), err))
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walk(l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i), errs)
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message(), fmt.Sprintf("%s[%v]", p, k.Interface()), errs)
					return true
				})
			}
		default:
			walk(v.Message(), p, errs)
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
