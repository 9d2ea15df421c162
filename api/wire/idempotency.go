package wire

// IdempotencyHeader is the optional sendMessage request header naming the
// message: a resend with the same value relays the turn already stored under
// it instead of storing the message again (a bae-go extension).
const IdempotencyHeader = "Idempotency-Key"

// MaxIdempotencyKeyLen bounds an Idempotency-Key (a UUID is 36 characters).
const MaxIdempotencyKeyLen = 128

// ParseIdempotencyKey validates the Idempotency-Key header values: absent is
// "", otherwise exactly one value of 1 to MaxIdempotencyKeyLen characters
// from A-Z a-z 0-9 and - _ . : ~ (UUIDs, ULIDs, base64url). A value quoted as
// a structured-field string ("…") is accepted without its quotes.
func ParseIdempotencyKey(values []string) (string, *Error) {
	switch len(values) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", invalid("more than one %s header", IdempotencyHeader)
	}
	k := values[0]
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	if k == "" || len(k) > MaxIdempotencyKeyLen {
		return "", invalid("%s must be 1 to %d characters", IdempotencyHeader, MaxIdempotencyKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if !keyChar(k[i]) {
			return "", invalid("%s may hold only A-Z, a-z, 0-9 and - _ . : ~", IdempotencyHeader)
		}
	}
	return k, nil
}

func keyChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '-', '_', '.', ':', '~':
		return true
	}
	return false
}
