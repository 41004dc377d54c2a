package jsonscan

import "unicode/utf8"

// KeyIs compares a raw key with a plain ASCII name, decoding escapes only
// when present (a client may spell "model" as "m\u006fdel").
func KeyIs(raw []byte, escaped bool, name string) bool {
	if !escaped {
		return string(raw) == name
	}
	var buf [MaxKey]byte
	return string(DecodeKey(&buf, raw)) == name
}

// MaxKey bounds the keys DecodeKey decodes: a name of 21 bytes (such as
// "max_completion_tokens") with every byte \u-escaped fits.
const MaxKey = 128

// DecodeKey returns a key with escapes decoded into buf. A key too long to
// be a name a caller looks for comes back raw: it still holds a backslash,
// so it matches none. Declare buf only for escaped keys, so plain ones do
// not pay for zeroing it.
func DecodeKey(buf *[MaxKey]byte, raw []byte) []byte {
	if len(raw) > MaxKey {
		return raw
	}
	if d, ok := Unescape(buf[:0], raw); ok {
		return d
	}
	return raw
}

// Unescape appends the decoded form of a raw string body to dst; false for
// an invalid escape. Lone surrogates become U+FFFD, as encoding/json does.
func Unescape(dst, raw []byte) ([]byte, bool) {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		if i+1 >= len(raw) {
			return dst, false
		}
		switch raw[i+1] {
		case '"', '\\', '/':
			dst = append(dst, raw[i+1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, n, ok := unicodeEscape(raw, i)
			if !ok {
				return dst, false
			}
			dst = utf8.AppendRune(dst, r)
			i += n
			continue
		default:
			return dst, false
		}
		i += 2
	}
	return dst, true
}

// unicodeEscape decodes the \u escape at raw[i], with the low half that
// follows a high surrogate: the rune and the escape's length.
func unicodeEscape(raw []byte, i int) (rune, int, bool) {
	r, ok := hex4(raw, i+2)
	if !ok {
		return 0, 0, false
	}
	if r >= 0xD800 && r < 0xDC00 && i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
		if r2, ok := hex4(raw, i+8); ok && r2 >= 0xDC00 && r2 < 0xE000 {
			return 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00), 12, true
		}
	}
	return r, 6, true
}
