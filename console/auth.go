package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/securecookie"
	"golang.org/x/crypto/argon2"
	"golang.org/x/time/rate"
)

// login is one signed-in browser: a random id (bound to its CSRF token) and
// the moment the login ends.
type login struct {
	ID      string `json:"i"`
	Expires int64  `json:"e"` // unix milliseconds
}

// loginRecords is where logins are recorded (store.Store): a cookie is
// only good while its login's record is, so logout ends it everywhere.
type loginRecords interface {
	CreateConsoleLogin(ctx context.Context, idHash, password []byte, expires, now time.Time) error
	ConsoleLoginLive(ctx context.Context, idHash, password []byte, now time.Time) (bool, error)
	EndConsoleLogin(ctx context.Context, idHash []byte) error
	EndConsoleLoginsExcept(ctx context.Context, password []byte) (int64, error)
}

// authenticator checks the console password and issues and verifies the
// signed login cookie. Every replica sharing the password and the database
// derives the same keys and reads the same login records; a cookie is
// genuine only while its record lives (logout deletes it) and was made with
// the current password (a changed password ends every older login).
type authenticator struct {
	password   [32]byte // sha256 of the password, compared in constant time
	cookies    *securecookie.SecureCookie
	csrfKey    []byte
	records    loginRecords
	recordKey  []byte // fingerprint of the password, stored with each login
	cookieName string
	secure     bool
	ttl        time.Duration
	now        func() time.Time
}

func newAuthenticator(password, salt string, secure bool, ttl time.Duration, records loginRecords, now func() time.Time) *authenticator {
	// A slow KDF, salted per deployment: a leaked cookie must not make
	// offline guessing of an operator-chosen password cheap.
	keys := argon2.IDKey([]byte(password), []byte("bae-console:"+salt), 2, 19*1024, 1, 64)
	sc := securecookie.New(keys[:32], nil)
	sc.SetSerializer(securecookie.JSONEncoder{})
	sc.MaxAge(int(ttl/time.Second) + 60) // backstop; Expires is what counts
	name := "bae_console"
	if secure {
		name = "__Host-bae_console" // the prefix makes browsers insist on Secure, Path=/ and no Domain
	}
	fp := hmac.New(sha256.New, keys[32:])
	fp.Write([]byte("bae-console login record"))
	return &authenticator{
		password: sha256.Sum256([]byte(password)), cookies: sc, csrfKey: keys[32:],
		records: records, recordKey: fp.Sum(nil)[:16],
		cookieName: name, secure: secure, ttl: ttl, now: now,
	}
}

// idHash is how a login is named in its record: a database reader learns
// nothing that goes into a cookie.
func idHash(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:]
}

func (a *authenticator) checkPassword(attempt string) bool {
	sum := sha256.Sum256([]byte(attempt))
	return subtle.ConstantTimeCompare(sum[:], a.password[:]) == 1
}

// issue records a fresh login and sets its cookie.
func (a *authenticator) issue(ctx context.Context, w http.ResponseWriter) error {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	now := a.now()
	l := login{ID: base64.RawURLEncoding.EncodeToString(b), Expires: now.Add(a.ttl).UnixMilli()}
	v, err := a.cookies.Encode(a.cookieName, l)
	if err != nil {
		return err
	}
	if err := a.records.CreateConsoleLogin(ctx, idHash(l.ID), a.recordKey, time.UnixMilli(l.Expires), now); err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name: a.cookieName, Value: v, Path: "/", MaxAge: int(a.ttl / time.Second),
		HttpOnly: true, Secure: a.secure, SameSite: http.SameSiteStrictMode,
	})
	return nil
}

// end deletes the login's record, so no copy of its cookie works any more,
// and clears the browser's cookie.
func (a *authenticator) end(ctx context.Context, w http.ResponseWriter, l login) error {
	a.clear(w)
	return a.records.EndConsoleLogin(ctx, idHash(l.ID))
}

func (a *authenticator) clear(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{
		Name: a.cookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: a.secure, SameSite: http.SameSiteStrictMode,
	})
}

var errNoLogin = errors.New("not logged in")

// verify returns the request's login if its cookie is genuine, unexpired
// now and its login not ended. Streams call it again on every wake-up. An
// error other than errNoLogin means the record could not be read.
func (a *authenticator) verify(r *http.Request) (login, error) {
	c, err := r.Cookie(a.cookieName)
	if err != nil {
		return login{}, errNoLogin
	}
	var l login
	if err := a.cookies.Decode(a.cookieName, c.Value, &l); err != nil {
		return login{}, errNoLogin
	}
	now := a.now()
	if l.ID == "" || now.UnixMilli() >= l.Expires {
		return login{}, errNoLogin
	}
	live, err := a.records.ConsoleLoginLive(r.Context(), idHash(l.ID), a.recordKey, now)
	if err != nil {
		return login{}, err
	}
	if !live {
		return login{}, errNoLogin
	}
	return l, nil
}

// csrfToken is bound to one login, so a token seen by one browser is
// useless with another's cookie.
func (a *authenticator) csrfToken(l login) string {
	m := hmac.New(sha256.New, a.csrfKey)
	m.Write([]byte(l.ID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (a *authenticator) checkCSRF(l login, token string) bool {
	return subtle.ConstantTimeCompare([]byte(a.csrfToken(l)), []byte(token)) == 1
}

type loginKey struct{}

func withLogin(ctx context.Context, l login) context.Context {
	return context.WithValue(ctx, loginKey{}, l)
}

func loginFrom(ctx context.Context) login {
	l, _ := ctx.Value(loginKey{}).(login)
	return l
}

// loginLimiter bounds password attempts per client address (per replica):
// a burst of loginBurst, then one every loginEvery.
type loginLimiter struct {
	mu    sync.Mutex
	every time.Duration
	burst int
	now   func() time.Time
	addrs map[string]*rate.Limiter
}

const (
	loginBurst = 5
	loginEvery = 12 * time.Second
	// maxTrackedAddrs bounds the limiter's memory; past it, full buckets
	// (addresses that are not currently limited) are forgotten.
	maxTrackedAddrs = 4096
)

func newLoginLimiter(now func() time.Time) *loginLimiter {
	return &loginLimiter{every: loginEvery, burst: loginBurst, now: now, addrs: map[string]*rate.Limiter{}}
}

// allow takes one attempt for addr, or reports how long to wait.
func (l *loginLimiter) allow(addr string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	lim := l.addrs[addr]
	if lim == nil {
		if len(l.addrs) >= maxTrackedAddrs {
			for k, v := range l.addrs {
				if v.TokensAt(now) >= float64(l.burst) {
					delete(l.addrs, k)
				}
			}
		}
		lim = rate.NewLimiter(rate.Every(l.every), l.burst)
		l.addrs[addr] = lim
	}
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

func remoteAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
