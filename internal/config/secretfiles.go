package config

import (
	"reflect"
	"slices"
)

// Secret files.
//
// A file: secret is read when the config loads. Kubernetes updates a
// mounted Secret in place (a new ..data symlink in the volume), and a
// provider key rotated that way was not seen until the config file itself
// changed: the gateway kept sending the revoked key. The config watcher
// (xds/watch) watches these files too and reloads when one of them holds
// another value than the config resolved.

// SecretFiles are the absolute paths the config's resolved file: secrets
// were read from, sorted, each once.
func (c *Config) SecretFiles() []string {
	var files []string
	eachSecret(reflect.ValueOf(c), func(s Secret) {
		if s.val != nil && s.val.file != "" {
			files = append(files, s.val.file)
		}
	})
	slices.Sort(files)
	return slices.Compact(files)
}

// SecretFilesChanged reports whether a resolved file: secret's file now
// holds another value, or cannot be read (its next load reports why).
func (c *Config) SecretFilesChanged() bool {
	changed := false
	eachSecret(reflect.ValueOf(c), func(s Secret) {
		if changed || s.val == nil || s.val.file == "" {
			return
		}
		b, err := readSecretFile(s.val.file)
		changed = err != nil || fileSecretValue(b) != s.val.v
	})
	return changed
}

var secretType = reflect.TypeFor[Secret]()

// eachSecret calls fn for every Secret reachable from v through exported
// fields, pointers, slices, arrays and map values.
func eachSecret(v reflect.Value, fn func(Secret)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			eachSecret(v.Elem(), fn)
		}
	case reflect.Struct:
		if v.Type() == secretType {
			fn(v.Interface().(Secret))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				eachSecret(v.Field(i), fn)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			eachSecret(v.Index(i), fn)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			eachSecret(it.Value(), fn)
		}
	}
}
