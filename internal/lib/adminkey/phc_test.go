package adminkey

import (
	"encoding/base64"
	"fmt"

	"golang.org/x/crypto/argon2"
)

func phcFor(token string, salt []byte) string {
	h := argon2.IDKey([]byte(token), salt, 1, 64, 1, 32)
	return fmt.Sprintf("$argon2id$v=19$m=64,t=1,p=1$%s$%s", base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(h))
}
